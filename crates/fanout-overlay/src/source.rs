//! The overlay's source: its children get the manifest, then the
//! object's fountain as fast as each takes it (a fresh symbol whenever a
//! child has had every one the source holds).

use crate::children::{ChildId, Children};
use crate::fountain::{FountainSource, Layout};
use crate::hop::Manifest;
use crate::symbol::SymbolKey;

/// The source of one object.
#[derive(Debug)]
pub struct OverlaySource {
    fountain: FountainSource,
    children: Children,
    manifest: Manifest,
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
            fountain: FountainSource::new(data, layout, object, key),
            children,
            manifest,
        }
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
    /// had every one held.
    pub fn writable(&mut self, id: ChildId) -> Option<&[u8]> {
        if self.children.caught_up(id) {
            let frame = self.fountain.next_frame();
            self.children.push(frame);
        }
        self.children.writable(id)
    }
}
