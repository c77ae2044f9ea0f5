//! Overlay hosts' progress on a terminal (nothing elsewhere): the host's
//! own bar (bytes read from its parent against the file's length) and one
//! bar per child (bytes written to it against the file's length: a child
//! decodes after a little more than the file), so the source shows every
//! host below it.

use fanout_io::overlay::OverlayProgress;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget};
use std::io::IsTerminal;

/// The bars of one host.
pub struct HostBars {
    multi: MultiProgress,
    /// Its own, once the file's length is known (nodes).
    own: Option<ProgressBar>,
    children: Vec<ProgressBar>,
    /// The file's length, bytes, once known.
    total: Option<u64>,
}

impl HostBars {
    /// Bars for a host serving a file of `total` bytes (the source), or
    /// of a length it learns later (`None`: a node).
    pub fn new(total: Option<u64>) -> Self {
        let target = if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        HostBars {
            multi: MultiProgress::with_draw_target(target),
            own: None,
            children: Vec::new(),
            total,
        }
    }

    /// Redraws: the node's own bytes read (`own`, with the file's length
    /// once its manifest came) and each child's bytes.
    pub fn update(&mut self, own: Option<(u64, u64)>, p: &OverlayProgress) {
        if let Some((read, total)) = own {
            self.total.get_or_insert(total);
            let bar = self.own.get_or_insert_with(|| {
                self.multi
                    .add(crate::progress::undrawn_bar(Some(total), "parent"))
            });
            bar.set_position(read.min(total));
        }
        let Some(total) = self.total else {
            return;
        };
        for (i, c) in p.children.iter().enumerate() {
            if i == self.children.len() {
                let bar = crate::progress::undrawn_bar(Some(total), &c.peer.to_string());
                self.children.push(self.multi.add(bar));
            }
            let bar = &self.children[i];
            if bar.is_finished() {
                continue;
            }
            bar.set_position(c.bytes.min(total));
            if !c.connected {
                bar.finish_with_message(if c.refused { "refused" } else { "done" });
            }
        }
    }

    /// Runs `f` (which prints lines) with the bars out of the way.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.multi.suspend(f)
    }

    /// Clears the bars.
    pub fn clear(&self) {
        let _ = self.multi.clear();
    }
}
