//! Typed kernel launches. Each batch kernel is declared once in Rust: its name, its argument
//! block (a `#[repr(C)]` struct made by [`kernel_args!`](crate::kernel_args) whose CUDA twin,
//! of the same name, the kernel takes by value) and its grid rule ([`KernelDecl`]). A
//! [`Kernel`] launches with one typed block instead of a positional list of `.arg()` calls,
//! and [`ArgsLayout::cuda_asserts`] turns the Rust layout into `static_assert`s that the
//! kernel check compiles with the kernels, so a field added, dropped, reordered or resized on
//! one side only fails CI (no GPU needed).
//!
//! Device addresses travel as [`Dev<T>`]: a raw 64-bit address typed by its element, taken
//! from a cudarc slice. cudarc's per-slice event tracking cannot see addresses inside a block,
//! so launches refuse a context that tracks events; [`context`] makes one that does not.
//! Cohort orders its work by streams itself (one stream per worker, uploads synchronised).

use crate::{DeviceInfo, GpuError};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig,
    PushKernelArg,
};
use std::marker::PhantomData;
use std::sync::Arc;

#[doc(hidden)]
pub use cudarc::driver::DeviceRepr;

/// A context of `dev` (the device's primary context, or a virtual GPU's green context) with
/// cudarc's event tracking off (see the module doc): the one way Cohort opens a device.
pub fn context(dev: &DeviceInfo) -> Result<Arc<CudaContext>, GpuError> {
    let ctx = open(dev)?;
    // SAFETY: no operation is in flight on a context just opened; every user orders its work
    // by stream (and synchronises uploads), not by cudarc's events.
    unsafe { ctx.disable_event_tracking() };
    Ok(ctx)
}

/// A context of `dev` with cudarc's event tracking as it comes (the persistent engines'
/// set-up relies on it): the device's primary context, or a virtual GPU's green context.
pub fn open(dev: &DeviceInfo) -> Result<Arc<CudaContext>, GpuError> {
    match dev.sm_group {
        None => Ok(CudaContext::new(dev.physical)?),
        Some((split, i)) => crate::green::context(split, i),
    }
}
/// A device address of `T`s, as a kernel argument (8 bytes, the CUDA side's `T*`).
#[repr(transparent)]
pub struct Dev<T>(u64, PhantomData<fn() -> T>);

impl<T> Clone for Dev<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Dev<T> {}
impl<T> Default for Dev<T> {
    fn default() -> Self {
        Dev::NULL
    }
}
impl<T> std::fmt::Debug for Dev<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dev({:#x})", self.0)
    }
}

impl<T> Dev<T> {
    /// No buffer (the kernels read it as "absent").
    pub const NULL: Dev<T> = Dev(0, PhantomData);

    /// Where `b` (a slice or a view of one) starts, for a kernel that reads it.
    pub fn of(b: &impl DevicePtr<T>, s: &CudaStream) -> Dev<T> {
        let (p, _no_tracking) = b.device_ptr(s);
        Dev(p, PhantomData)
    }

    /// Where `b` starts, for a kernel that writes it (takes `&mut`: a launch that writes a
    /// buffer says so at the call, as cudarc's own arguments do).
    pub fn of_mut(b: &mut impl DevicePtrMut<T>, s: &CudaStream) -> Dev<T> {
        let (p, _no_tracking) = b.device_ptr_mut(s);
        Dev(p, PhantomData)
    }

    /// An address the caller holds by other means (mapped, managed or peer memory).
    pub fn raw(addr: u64) -> Dev<T> {
        Dev(addr, PhantomData)
    }

    /// The same address read as `U`s: bytes a kernel moves as whole words, or `()` for the
    /// CUDA side's `const void*` (kernels instantiated over several element types).
    pub fn cast<U>(self) -> Dev<U> {
        Dev(self.0, PhantomData)
    }

    /// The raw address.
    pub fn addr(self) -> u64 {
        self.0
    }
}

/// A kernel argument block's layout as Rust lays it out: what the CUDA struct of the same
/// name must match.
#[derive(Debug, Clone, Copy)]
pub struct ArgsLayout {
    /// The struct's name, on both sides.
    pub name: &'static str,
    pub size: usize,
    /// (field, offset, size), in declaration order.
    pub fields: &'static [(&'static str, usize, usize)],
}

impl ArgsLayout {
    /// `static_assert`s (offsets through `__INTADDR__`, the CUDA front end's constant
    /// `offsetof`: NVRTC has no `<cstddef>`) that hold exactly when the CUDA struct `name` has Rust's size and
    /// every Rust field at Rust's offset with Rust's size (a field missing on the CUDA side
    /// does not compile).
    pub fn cuda_asserts(&self) -> String {
        let n = self.name;
        let mut out = format!(
            "static_assert(sizeof({n}) == {}, \"{n}: size differs from Rust's ({})\");\n",
            self.size, self.size
        );
        for (f, off, size) in self.fields {
            out.push_str(&format!(
                "static_assert(__INTADDR__(&(({n}*)0)->{f}) == {off}, \"{n}.{f}: offset differs from Rust's ({off})\");\n\
                 static_assert(sizeof((({n}*)0)->{f}) == {size}, \"{n}.{f}: size differs from Rust's ({size})\");\n"
            ));
        }
        out
    }
}

/// A `#[repr(C)]` argument block whose CUDA twin has the same name.
pub trait KernelArgs: DeviceRepr + Copy {
    const LAYOUT: ArgsLayout;
}

/// Declares a kernel argument block: a `#[repr(C)]` struct with the given fields (device
/// addresses as [`Dev<T>`](crate::launch::Dev), numbers as `i32`, `u32`, `u64`, `f32`), and
/// its [`ArgsLayout`](crate::launch::ArgsLayout) for the layout check.
#[macro_export]
macro_rules! kernel_args {
    ($(#[$m:meta])* $vis:vis struct $name:ident { $($(#[$fm:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $crate::kernel_args! {
            @make [stringify!($name)] $(#[$m])* $vis struct $name { $($(#[$fm])* $field : $ty),* }
        }
    };
    // `as "CName"`: the CUDA struct has another name (the runtime's `PRt`).
    ($(#[$m:meta])* $vis:vis struct $name:ident as $cuda:literal { $($(#[$fm:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $crate::kernel_args! {
            @make [$cuda] $(#[$m])* $vis struct $name { $($(#[$fm])* $field : $ty),* }
        }
    };
    (@make [$cuda:expr] $(#[$m:meta])* $vis:vis struct $name:ident { $($(#[$fm:meta])* $field:ident : $ty:ty),* }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy, Default)]
        $vis struct $name {
            $($(#[$fm])* pub $field: $ty,)*
        }

        // SAFETY: a `#[repr(C)]` block of device addresses and numbers, no references; its
        // layout is checked against its CUDA struct when the kernels compile.
        unsafe impl $crate::launch::DeviceRepr for $name {}

        impl $crate::launch::KernelArgs for $name {
            const LAYOUT: $crate::launch::ArgsLayout = $crate::launch::ArgsLayout {
                name: $cuda,
                size: ::core::mem::size_of::<$name>(),
                fields: &[$((
                    stringify!($field),
                    ::core::mem::offset_of!($name, $field),
                    ::core::mem::size_of::<$ty>(),
                )),*],
            };
        }
    };
}

/// How a kernel's grid follows from its work: the kernel's indexing assumes this rule, so it
/// is declared with the kernel, not chosen at each call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grid {
    /// A thread per item: ceil(items / block) blocks, at most `cap` (the kernel strides over
    /// the rest; 0 = no cap).
    ThreadPerItem { cap: u32 },
    /// A block per item.
    BlockPerItem,
    /// A block per this many items (a tile of rows).
    ItemsPerBlock(u32),
    /// The caller sizes the grid (x, y) from work only the caller knows (tile counts, row
    /// chunks, resident blocks); the kernel strides or bounds-checks.
    Sized,
}

impl Grid {
    /// The grid `work` makes under this rule with blocks of `block` threads; `None` for no
    /// work at all.
    pub fn dims(self, block: u32, work: Work) -> Result<Option<(u32, u32)>, GpuError> {
        let g = match (self, work) {
            (Grid::ThreadPerItem { cap }, Work::Items(n)) => {
                let b = n.div_ceil(block as usize);
                let b = if cap > 0 { b.min(cap as usize) } else { b };
                (u32::try_from(b).map_err(|_| too_big(n))?, 1)
            }
            (Grid::BlockPerItem, Work::Items(n)) => (u32::try_from(n).map_err(|_| too_big(n))?, 1),
            (Grid::ItemsPerBlock(per), Work::Items(n)) => (
                u32::try_from(n.div_ceil(per.max(1) as usize)).map_err(|_| too_big(n))?,
                1,
            ),
            (Grid::Sized, Work::Grid(x, y)) => (x, y),
            (rule, w) => {
                return Err(GpuError::Invalid(format!(
                    "launch of {w:?} against a kernel whose grid rule is {rule:?}"
                )))
            }
        };
        Ok((g.0 > 0 && g.1 > 0).then_some(g))
    }
}

/// A kernel, declared once: its exported name, its argument block `A`, its block size and
/// its grid rule.
pub struct KernelDecl<A> {
    pub name: &'static str,
    /// Threads per block along x (and y: 1 unless the kernel indexes threadIdx.y).
    pub block: u32,
    pub block_y: u32,
    pub grid: Grid,
    args: PhantomData<fn(A)>,
}

impl<A: KernelArgs> KernelDecl<A> {
    pub const fn new(name: &'static str, block: u32, grid: Grid) -> KernelDecl<A> {
        KernelDecl {
            name,
            block,
            block_y: 1,
            grid,
            args: PhantomData,
        }
    }

    /// A two-dimensional block of `block` x `y` threads.
    pub const fn with_block_y(self, y: u32) -> KernelDecl<A> {
        KernelDecl { block_y: y, ..self }
    }

    /// The kernel's name and its argument block's layout (what the kernel check compares).
    pub const fn checked(&self) -> (&'static str, ArgsLayout) {
        (self.name, A::LAYOUT)
    }
}

/// A declared kernel, loaded from its module.
pub struct Kernel<A> {
    func: CudaFunction,
    block: u32,
    block_y: u32,
    grid: Grid,
    args: PhantomData<fn(A)>,
}

impl<A> Clone for Kernel<A> {
    fn clone(&self) -> Self {
        Kernel {
            func: self.func.clone(),
            block: self.block,
            block_y: self.block_y,
            grid: self.grid,
            args: PhantomData,
        }
    }
}

/// What one launch covers: `Items(n)` for the per-item rules, `Grid(x, y)` for [`Grid::Sized`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    Items(usize),
    Grid(u32, u32),
}

impl<A: KernelArgs> Kernel<A> {
    pub fn load(module: &Arc<CudaModule>, decl: &KernelDecl<A>) -> Result<Kernel<A>, GpuError> {
        Ok(Kernel {
            func: module.load_function(decl.name)?,
            block: decl.block,
            block_y: decl.block_y,
            grid: decl.grid,
            args: PhantomData,
        })
    }

    /// One kernel per declaration (the variants of one kernel over element types).
    pub fn load_each<const N: usize>(
        module: &Arc<CudaModule>,
        decls: &[KernelDecl<A>; N],
    ) -> Result<[Kernel<A>; N], GpuError> {
        let mut out = Vec::with_capacity(N);
        for d in decls {
            out.push(Kernel::load(module, d)?);
        }
        Ok(out
            .try_into()
            .unwrap_or_else(|_| unreachable!("N declarations make N kernels")))
    }

    /// Launches the kernel over `work` on `s` with dynamic shared memory `shared` bytes. A
    /// launch over no work does nothing.
    ///
    /// # Safety
    /// Every address in `args` must point at a live buffer at least as large as the kernel
    /// reads or writes for this work, until the launch completes on `s`.
    pub unsafe fn launch(
        &self,
        s: &Arc<CudaStream>,
        work: Work,
        shared: u32,
        args: &A,
    ) -> Result<(), GpuError> {
        if s.context().is_event_tracking() {
            return Err(GpuError::Invalid(
                "typed launches need a context without event tracking (cohort_gpu::context)".into(),
            ));
        }
        let Some((x, y)) = self.grid.dims(self.block, work)? else {
            return Ok(());
        };
        let cfg = LaunchConfig {
            grid_dim: (x, y, 1),
            block_dim: (self.block, self.block_y, 1),
            shared_mem_bytes: shared,
        };
        let mut l = s.launch_builder(&self.func);
        l.arg(args);
        // SAFETY: `A`'s layout is the kernel's parameter (checked when the kernels compile);
        // the caller vouches for the addresses in it.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }
}

fn too_big(n: usize) -> GpuError {
    GpuError::Invalid(format!("{n} items: more blocks than a grid holds"))
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::kernel_args! {
        struct DemoArgs { a: Dev<f32>, n: i32, b: Dev<u32>, x: f32, c: u64 }
    }

    #[test]
    fn layout_is_rusts_repr_c_and_asserts_name_every_field() {
        let l = DemoArgs::LAYOUT;
        assert_eq!(l.name, "DemoArgs");
        assert_eq!(l.size, 40);
        assert_eq!(
            l.fields,
            &[
                ("a", 0, 8),
                ("n", 8, 4),
                ("b", 16, 8),
                ("x", 24, 4),
                ("c", 32, 8)
            ]
        );
        let a = l.cuda_asserts();
        assert!(a.contains("sizeof(DemoArgs) == 40"));
        assert!(a.contains("__INTADDR__(&((DemoArgs*)0)->b) == 16"));
        assert!(a.contains("sizeof(((DemoArgs*)0)->n) == 4"));
        assert_eq!(a.lines().count(), 1 + 2 * 5);
    }

    #[test]
    fn grid_rules() {
        let t = Grid::ThreadPerItem { cap: 0 };
        assert_eq!(t.dims(256, Work::Items(257)).unwrap(), Some((2, 1)));
        assert_eq!(t.dims(256, Work::Items(0)).unwrap(), None);
        let capped = Grid::ThreadPerItem { cap: 4 };
        assert_eq!(capped.dims(32, Work::Items(1000)).unwrap(), Some((4, 1)));
        assert_eq!(
            Grid::BlockPerItem.dims(256, Work::Items(7)).unwrap(),
            Some((7, 1))
        );
        assert_eq!(
            Grid::Sized.dims(256, Work::Grid(3, 5)).unwrap(),
            Some((3, 5))
        );
        let tiles = Grid::ItemsPerBlock(64);
        assert_eq!(tiles.dims(256, Work::Items(65)).unwrap(), Some((2, 1)));
        assert!(Grid::Sized.dims(256, Work::Items(3)).is_err());
        assert!(Grid::BlockPerItem.dims(256, Work::Grid(1, 1)).is_err());
    }
}
