//! Newtype identifiers for simulator objects (indices into dense vectors).

use std::fmt;

macro_rules! sim_id {
    ($(#[$m:meta])* $name:ident, $prefix:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u32);

        impl $name {
            /// The dense index this id stands for.
            pub fn index(self) -> usize {
                self.0 as usize
            }

            pub(crate) fn from_index(i: usize) -> Self {
                $name(u32::try_from(i).expect("more than u32::MAX simulator objects"))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

sim_id!(
    /// A host or router (one IP address).
    NodeId,
    "n"
);
sim_id!(
    /// A directed link between two nodes.
    LinkId,
    "l"
);
sim_id!(
    /// An engine bound to a (node, port).
    AppId,
    "a"
);
sim_id!(
    /// A multicast group (one group IP address).
    GroupId,
    "g"
);
