//! A persistent service's kernels, typed as the batch kernels are (`crate::launch`). Its
//! argument block is declared once in Rust by [`svc_args!`](crate::svc_args): a `#[repr(C)]`
//! struct of 64-bit fields whose CUDA twin is the service's `struct SvcArgs`, with its
//! [`ArgsLayout`](crate::launch::ArgsLayout); each stage kernel is a [`StageKernel`] of that
//! block. `persistent_source` ends the unit with the block's layout as `static_assert`s and
//! records every stage with it, so a field added, dropped or reordered on one side only fails
//! the kernel compile (CI, no GPU), and the kernel check holds the unit's exports to its
//! declared stages.

use crate::launch::{ArgsLayout, KernelArgs};
use std::marker::PhantomData;

/// Declares a persistent service's argument block: a `#[repr(C)]` struct of `u64` fields
/// (device addresses and counts) named `SvcArgs` on the CUDA side, with `to_svc_args`, the
/// block the runtime passes to every stage kernel.
#[macro_export]
macro_rules! svc_args {
    ($(#[$m:meta])* $vis:vis struct $name:ident { $($(#[$fm:meta])* $field:ident),* $(,)? }) => {
        $crate::kernel_args! {
            $(#[$m])* $vis struct $name as "SvcArgs" { $($(#[$fm])* $field: u64),* }
        }

        impl $name {
            /// The block the runtime hands the stage kernels.
            pub fn to_svc_args(self) -> $crate::persistent::SvcArgs {
                $crate::persistent::SvcArgs::new(&[$(self.$field),*])
            }
        }
    };
}

/// A stage kernel of a persistent service, declared once: its exported name; it takes the
/// runtime's block and the service's (`(PRt rt, SvcArgs a)`), `A` being the service's.
pub struct StageKernel<A> {
    pub name: &'static str,
    args: PhantomData<fn(A)>,
}

impl<A: KernelArgs> StageKernel<A> {
    pub const fn new(name: &'static str) -> StageKernel<A> {
        StageKernel {
            name,
            args: PhantomData,
        }
    }

    /// The kernel's name and its service block's layout (what the kernel check compares).
    pub const fn checked(&self) -> (&'static str, ArgsLayout) {
        (self.name, A::LAYOUT)
    }
}

#[cfg(test)]
mod tests {
    crate::svc_args! {
        /// A block of three fields.
        struct Three { queries, k, out }
    }

    #[test]
    fn a_block_is_laid_out_as_its_cuda_struct_of_64_bit_fields() {
        use crate::launch::KernelArgs;
        let l = Three::LAYOUT;
        assert_eq!((l.name, l.size), ("SvcArgs", 24));
        assert_eq!(
            l.fields,
            &[("queries", 0, 8), ("k", 8, 8), ("out", 16, 8)][..]
        );
        let a = Three {
            queries: 7,
            k: 10,
            out: 9,
        }
        .to_svc_args();
        assert_eq!(&a.0[..4], &[7, 10, 9, 0]);
        let asserts = l.cuda_asserts();
        assert!(asserts.contains("static_assert(sizeof(SvcArgs) == 24"));
        assert!(asserts.contains("->k) == 8"));
    }
}
