//! The overlay's source: its children get the manifest, then the
//! object's fountain as fast as each takes it (a fresh symbol whenever a
//! child has had every one the source holds). A source that planned the
//! tree first sends a child planned under another host a redirect there
//! ([`crate::redirect`]).

use crate::children::{ChildId, Children};
use crate::fountain::{FountainSource, Layout};
use crate::hop::Manifest;
use crate::redirect::{seal_redirect, Redirects};
use crate::symbol::SymbolKey;

/// The source of one object.
#[derive(Debug)]
pub struct OverlaySource {
    fountain: FountainSource,
    children: Children,
    manifest: Manifest,
    key: SymbolKey,
    redirects: Redirects,
    /// Redirects written so far.
    redirected: u64,
}

impl OverlaySource {
    /// The source of `data` named `name`, object id `object`, coded as
    /// `layout` from blocks of at most `block_bytes`, sealed with `key`,
    /// through a buffer of `buffer_bytes`.
    pub fn new(
        data: Vec<u8>,
        name: &str,
        object: u64,
        (layout, block_bytes): (Layout, u64),
        key: SymbolKey,
        buffer_bytes: usize,
    ) -> Self {
        let manifest = Manifest {
            object,
            layout,
            block_bytes,
            hash: blake3::hash(&data),
            name: name.to_owned(),
        };
        let mut children = Children::new(buffer_bytes);
        children.start(manifest.seal(&key), layout.frame_len());
        OverlaySource {
            fountain: FountainSource::new(data, layout, object, key.clone()),
            key,
            children,
            manifest,
            redirects: Redirects::new(),
            redirected: 0,
        }
    }

    /// Sends each child that `redirects` places under another host a
    /// redirect there, as the first frame after the manifest.
    pub fn with_redirects(mut self, redirects: Redirects) -> Self {
        self.redirects = redirects;
        self
    }

    /// Redirects written to children so far.
    pub fn redirected(&self) -> u64 {
        self.redirected
    }

    /// The object's manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Its children.
    pub fn children(&mut self) -> &mut Children {
        &mut self.children
    }

    /// The bytes to write to `id` next, making a fresh symbol when it has
    /// had every one held; first a redirect if the plan puts it below
    /// another host.
    pub fn writable(&mut self, id: ChildId) -> Option<&[u8]> {
        if self.children.caught_up(id) {
            if let Some(g) = self.children.take_greeting(id) {
                let m = &self.manifest;
                let frame = self
                    .redirects
                    .lookup(&g)
                    .and_then(|to| seal_redirect(&self.key, m.object, m.layout.symbol_size(), to));
                if let Some(frame) = frame {
                    if self.children.push_to(id, frame) {
                        self.redirected += 1;
                        return self.children.writable(id);
                    }
                }
            }
            let frame = self.fountain.next_frame();
            self.children.push(frame);
        }
        self.children.writable(id)
    }
}
