//! One-sided writes (Lynx's design, a worker made with [`Worker::with_rma`]): regions of a
//! worker's memory that peers write ([`Worker::register`]), their keys, and writes into a
//! peer's region ([`Worker::remote_key`], [`Worker::put`], [`Worker::fence`]).

use crate::{check, sys, EpId, Error, Region, Worker};
use std::ffi::c_void;

/// A region of this worker's memory that peers may write ([`Worker::register`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RegionId(u32);

/// A peer's region as this worker writes it: its key unpacked on one endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteKey {
    ep: EpId,
    id: u64,
}

/// Largest region [`Worker::register`] makes (a ring of batches is a few MiB).
pub const MAX_REGION_BYTES: usize = 1 << 30;
/// Largest packed key [`Worker::remote_key`] accepts (UCX's are tens to hundreds of bytes).
pub const MAX_KEY_BYTES: usize = 4096;

/// A registered region's memory, read and written by its owner while peers write it too:
/// every access goes through atomics or raw copies, never a Rust reference to the bytes.
pub struct RegionMemory<'a> {
    ptr: *mut u8,
    len: usize,
    _worker: std::marker::PhantomData<&'a Worker>,
}

impl RegionMemory<'_> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where a peer writes it (the address its puts name, with the key).
    pub fn address(&self) -> u64 {
        self.ptr as u64
    }

    fn word(&self, off: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(
            off.is_multiple_of(8) && off + 8 <= self.len,
            "word at {off} of a region of {}",
            self.len
        );
        // SAFETY: in bounds and aligned (the region starts 8-aligned: `mapped`), and the memory lives
        // while the worker that owns it is borrowed.
        unsafe { &*(self.ptr.add(off) as *const std::sync::atomic::AtomicU64) }
    }

    /// The 8-byte word at `off` (a multiple of 8), with acquire ordering: what a peer wrote
    /// before it (and fenced) is visible after.
    pub fn load_u64(&self, off: usize) -> u64 {
        self.word(off).load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn store_u64(&self, off: usize, v: u64) {
        self.word(off)
            .store(v, std::sync::atomic::Ordering::Release)
    }

    /// Copies `out.len()` bytes from `off`.
    pub fn read(&self, off: usize, out: &mut [u8]) {
        assert!(
            off <= self.len && out.len() <= self.len - off,
            "{} bytes at {off} of a region of {}",
            out.len(),
            self.len
        );
        // SAFETY: in bounds (checked above); the source is raw memory, not a reference.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), out.as_mut_ptr(), out.len()) }
    }
}

impl Worker {
    fn need_rma(&self, what: &'static str) -> Result<(), Error> {
        if self.rma {
            Ok(())
        } else {
            Err(Error::Call {
                what,
                why: "this worker was made without RMA (Worker::with_rma)".into(),
            })
        }
    }

    /// Registers `len` bytes of zeroed memory that peers may write (and read) with the key
    /// [`Worker::region_key`] gives. The memory lives until [`Worker::unregister`] or the
    /// worker's end.
    ///
    /// UCX allocates it (`UCP_MEM_MAP_ALLOCATE`), in a shared-memory segment where its
    /// configuration allows (`UCX_MEM_ALLOC_METHOD`, System V first by default): a peer on the
    /// same machine then maps the segment and writes with a store, where memory this process
    /// allocated would be written through cross-memory attach, two system calls a ring batch
    /// (measured: rings then answered slower than messages over shared memory). A segment a
    /// peer has mapped also outlives this worker's unmapping, so a late write lands in the
    /// segment, not in whatever this process reuses the pages for.
    pub fn register(&mut self, len: usize) -> Result<RegionId, Error> {
        self.need_rma("mem_map")?;
        if len == 0 || len > MAX_REGION_BYTES {
            return Err(Error::Call {
                what: "mem_map",
                why: format!("a region of {len} bytes (1 to {MAX_REGION_BYTES})"),
            });
        }
        let params = sys::MemMapParams {
            field_mask: sys::UCP_MEM_MAP_PARAM_FIELD_ADDRESS
                | sys::UCP_MEM_MAP_PARAM_FIELD_LENGTH
                | sys::UCP_MEM_MAP_PARAM_FIELD_FLAGS
                | sys::UCP_MEM_MAP_PARAM_FIELD_PROT,
            address: std::ptr::null_mut(),
            length: len,
            flags: sys::UCP_MEM_MAP_ALLOCATE,
            prot: sys::UCP_MEM_MAP_PROT_LOCAL_READ
                | sys::UCP_MEM_MAP_PROT_LOCAL_WRITE
                | sys::UCP_MEM_MAP_PROT_REMOTE_READ
                | sys::UCP_MEM_MAP_PROT_REMOTE_WRITE,
            memory_type: 0,
            exported_memh_buffer: std::ptr::null(),
        };
        let api = &self.ucx.api;
        let mut memh: sys::MemH = std::ptr::null_mut();
        // SAFETY: our context; UCX allocates `len` bytes and owns them until unmapped.
        check(self.ucx, "mem_map", unsafe {
            (api.mem_map)(self.context, &params, &mut memh)
        })?;
        let made = self.mapped(memh, len);
        match made {
            Ok((ptr, key)) => {
                self.regions.push(Some(Region {
                    ptr,
                    len,
                    memh,
                    key,
                }));
                Ok(RegionId(self.regions.len() as u32 - 1))
            }
            Err(e) => {
                // SAFETY: the handle mapped above, unmapped once.
                unsafe { (api.mem_unmap)(self.context, memh) };
                Err(e)
            }
        }
    }

    /// The address of memory UCX allocated for `memh` (at least `len` bytes, zeroed here:
    /// not every allocation method zeroes), and its packed key.
    fn mapped(&self, memh: sys::MemH, len: usize) -> Result<(*mut u8, Vec<u8>), Error> {
        let api = &self.ucx.api;
        let mut attr = sys::MemAttr {
            field_mask: sys::UCP_MEM_ATTR_FIELD_ADDRESS | sys::UCP_MEM_ATTR_FIELD_LENGTH,
            address: std::ptr::null_mut(),
            length: 0,
            mem_type: 0,
        };
        // SAFETY: a handle just mapped; UCX fills the fields the mask names.
        check(self.ucx, "mem_query", unsafe {
            (api.mem_query)(memh, &mut attr)
        })?;
        let ptr = attr.address as *mut u8;
        if ptr.is_null() || attr.length < len || !(ptr as usize).is_multiple_of(8) {
            return Err(Error::Call {
                what: "mem_query",
                why: format!(
                    "UCX allocated {} bytes at {ptr:p} for a region of {len}",
                    attr.length
                ),
            });
        }
        // SAFETY: `len` bytes at `ptr` are this mapping's (checked above), not yet shared.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        let (mut buf, mut size) = (std::ptr::null_mut(), 0usize);
        // SAFETY: a mapped handle; UCX allocates the packed key, released below.
        check(self.ucx, "rkey_pack", unsafe {
            (api.rkey_pack)(self.context, memh, &mut buf, &mut size)
        })?;
        // SAFETY: UCX wrote `size` bytes at `buf`.
        let key = unsafe { std::slice::from_raw_parts(buf as *const u8, size) }.to_vec();
        // SAFETY: the buffer rkey_pack gave, released once.
        unsafe { (api.rkey_buffer_release)(buf) };
        Ok((ptr, key))
    }

    fn region_entry(&self, id: RegionId) -> Option<&Region> {
        self.regions.get(id.0 as usize)?.as_ref()
    }

    /// The packed key a peer unpacks ([`Worker::remote_key`]) to write region `id`.
    pub fn region_key(&self, id: RegionId) -> Option<&[u8]> {
        self.region_entry(id).map(|r| r.key.as_slice())
    }

    /// Region `id`'s memory.
    pub fn region(&self, id: RegionId) -> Option<RegionMemory<'_>> {
        self.region_entry(id).map(|r| RegionMemory {
            ptr: r.ptr,
            len: r.len,
            _worker: std::marker::PhantomData,
        })
    }

    /// Unregisters and frees region `id`. Peers holding its key must not write it after
    /// (a write then is undefined in UCX): the caller's protocol makes sure of that.
    pub fn unregister(&mut self, id: RegionId) {
        let Some(r) = self.regions.get_mut(id.0 as usize).and_then(Option::take) else {
            return;
        };
        // SAFETY: mapped (and allocated) by this worker's context, unmapped once (taken
        // above): UCX frees what it allocated.
        unsafe { (self.ucx.api.mem_unmap)(self.context, r.memh) };
    }

    /// Unpacks a peer's region key (what its [`Worker::region_key`] gave) for writes on `ep`,
    /// an endpoint a message has come on (so connected: the key is usually in that message):
    /// one this worker made or accepted, or the reply endpoint UCX made for a peer that
    /// connected by this worker's address. The key lives until `ep` closes
    /// ([`Worker::close`], also for a reply endpoint, which stays UCX's).
    pub fn remote_key(&mut self, ep: EpId, key: &[u8]) -> Result<RemoteKey, Error> {
        self.need_rma("rkey_unpack")?;
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(Error::Call {
                what: "rkey_unpack",
                why: format!("a key of {} bytes (1 to {MAX_KEY_BYTES})", key.len()),
            });
        }
        // UCX reads the endpoint's transports to unpack a key: on an endpoint still
        // connecting (a client's, before the server's first message) it crashed.
        if !self.shared.heard.borrow().contains(&ep) {
            return Err(Error::Call {
                what: "rkey_unpack",
                why: "no message has come on this endpoint (it may still be connecting, or be none of this worker's)".into(),
            });
        }
        let mut rkey: sys::RKey = std::ptr::null_mut();
        // SAFETY: a live endpoint of ours; UCX reads `key.len()` bytes of the key.
        check(self.ucx, "rkey_unpack", unsafe {
            (self.ucx.api.ep_rkey_unpack)(ep.raw(), key.as_ptr() as *const c_void, &mut rkey)
        })?;
        let id = self.next_rkey;
        self.next_rkey += 1;
        self.rkeys.insert(id, (ep, rkey));
        Ok(RemoteKey { ep, id })
    }

    /// Writes `data` at `address` of a peer's region (one-sided: the peer is not called).
    /// Writes on one endpoint may land in any order unless [`Worker::fence`] is between them.
    /// The bytes are kept until UCX is done with them.
    pub fn put(&mut self, key: RemoteKey, address: u64, data: Vec<u8>) -> Result<(), Error> {
        let Some(&(ep, rkey)) = self.rkeys.get(&key.id) else {
            return Err(Error::Call {
                what: "put",
                why: "a key whose endpoint closed".into(),
            });
        };
        debug_assert_eq!(ep, key.ep);
        // SAFETY: all-zero selects nothing (no callback: completion is polled).
        let param: sys::RequestParam = unsafe { std::mem::zeroed() };
        // SAFETY: a live endpoint and its key; `data` stays alive until complete.
        let r = unsafe {
            (self.ucx.api.put_nbx)(
                ep.raw(),
                data.as_ptr() as *const c_void,
                data.len(),
                address,
                rkey,
                &param,
            )
        };
        self.hold_until_sent("put", r, data)
    }

    /// Orders this worker's operations: those issued on an endpoint before land before those
    /// issued on it after (a ring's data before the word that publishes it).
    pub fn fence(&mut self) -> Result<(), Error> {
        // SAFETY: our worker, on its own thread.
        check(self.ucx, "fence", unsafe {
            (self.ucx.api.worker_fence)(self.worker)
        })
    }
}
