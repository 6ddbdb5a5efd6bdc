//! UCX active messages for Cohort's cluster transport: one [`Worker`] per thread (UCX's
//! single-thread mode, no locks), a listener on the node side, client endpoints on the front
//! end, messages sent eagerly (the receiver gets each whole in its callback, no rendezvous
//! round trip) and their buffers kept until UCX has sent them.
//!
//! A worker made with [`Worker::with_rma`] also does one-sided writes (Lynx's design): it
//! registers memory of its own ([`Worker::register`]) whose key a peer unpacks
//! ([`Worker::remote_key`]) to write into it with [`Worker::put`], the owner never called.
//!
//! The binding is this crate's own over UCP's C API (`sys`), loaded at run time (`load`).
//! Callbacks never call back into the owner: they queue [`Event`]s that the owner takes after
//! [`Worker::progress`].

mod load;
mod stalled;
pub mod sys;

pub use load::{load, Ucx};

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_void, CStr};
use std::net::SocketAddr;
use sys::{ptr_status, PtrStatus};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Load(String),
    #[error("UCX {what}: {why}")]
    Call { what: &'static str, why: String },
}

/// An endpoint: one connection, named by UCX's handle (stable while it lives).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EpId(usize);

impl EpId {
    fn raw(self) -> sys::Ep {
        self.0 as sys::Ep
    }
}

/// What happened during [`Worker::progress`].
#[derive(Debug)]
pub enum Event {
    /// A peer connected to the listener (its endpoint is ready for replies).
    Accepted(EpId),
    /// A message arrived; `from` is the endpoint to answer on (None: the sender asked for no
    /// reply endpoint).
    Message { from: Option<EpId>, data: Vec<u8> },
    /// The connection failed (peer gone, network error); the endpoint is closed.
    Failed { ep: EpId, why: String },
}

/// How a worker waits and learns of failed peers ([`Worker::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Events,
    Polled,
}

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

struct Region {
    ptr: *mut u8,
    len: usize,
    memh: sys::MemH,
    key: Vec<u8>,
}

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

/// The one active-message id Cohort uses; its payload says what it is.
const AM_ID: u32 = 17;
/// The connection manager's setting for SO_REUSEADDR on listeners (`UCX_CM_REUSEADDR`).
const REUSEADDR: &std::ffi::CStr = c"CM_REUSEADDR";

struct Shared {
    events: RefCell<Vec<Event>>,
    /// UCP's error-handling mode for this worker's endpoints.
    err_mode: std::ffi::c_int,
    worker: sys::Worker,
    api: *const sys::Api,
    /// Endpoints made by the listener's callback: ours to close.
    accepted: RefCell<HashSet<EpId>>,
    /// Endpoints a message has come on: connected, so a peer's key may be unpacked there.
    heard: RefCell<HashSet<EpId>>,
}

/// A UCP context and worker used by one thread.
pub struct Worker {
    ucx: &'static Ucx,
    context: sys::Context,
    worker: sys::Worker,
    listener: Option<sys::Listener>,
    /// Closes the listener's connections whose handshake cannot finish (`stalled`).
    sweeper: Option<stalled::Sweeper>,
    /// The peers dialed by `connect`, for `sweep_dialed`.
    dials: stalled::DialSweeper,
    shared: Box<Shared>,
    eps: HashSet<EpId>,
    /// Sends UCX has not finished: the request and the bytes it reads.
    pending: Vec<(*mut c_void, Vec<u8>)>,
    closing: Vec<*mut c_void>,
    /// Whether the context has RMA ([`Worker::with_rma`]).
    rma: bool,
    regions: Vec<Option<Region>>,
    /// Peers' keys unpacked here, by id: destroyed before their endpoint closes.
    rkeys: HashMap<u64, (EpId, sys::RKey)>,
    next_rkey: u64,
}

fn check(ucx: &Ucx, what: &'static str, s: sys::Status) -> Result<(), Error> {
    if s == sys::UCS_OK {
        Ok(())
    } else {
        Err(Error::Call {
            what,
            why: status_string(ucx, s),
        })
    }
}

fn status_string(ucx: &Ucx, s: sys::Status) -> String {
    // SAFETY: ucs_status_string returns a static string for any status.
    unsafe { CStr::from_ptr((ucx.api.status_string)(s)) }
        .to_string_lossy()
        .into_owned()
}

/// A socket address as UCX reads it (the storage must outlive the call).
fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    let s = socket2::SockAddr::from(addr);
    // SAFETY: SockAddr holds a sockaddr_storage of `len` valid bytes.
    let storage = unsafe { std::ptr::read(s.as_ptr() as *const libc::sockaddr_storage) };
    (storage, s.len())
}

unsafe extern "C" fn on_message(
    arg: *mut c_void,
    _header: *const c_void,
    _header_len: usize,
    data: *mut c_void,
    len: usize,
    param: *const sys::AmRecvParam,
) -> sys::Status {
    // SAFETY: arg is the worker's Shared, alive while its handler is registered; UCX passes a
    // valid param and `len` readable bytes at `data`.
    let shared = &*(arg as *const Shared);
    let param = &*param;
    if param.recv_attr & sys::UCP_AM_RECV_ATTR_FLAG_RNDV != 0 {
        // Every sender here sends eagerly; a rendezvous message is not ours.
        tracing::error!(
            len,
            "UCX: a rendezvous active message, not Cohort's; dropped"
        );
        return sys::UCS_OK;
    }
    let from = (param.recv_attr & sys::UCP_AM_RECV_ATTR_FIELD_REPLY_EP != 0)
        .then_some(EpId(param.reply_ep as usize));
    if let Some(ep) = from {
        shared.heard.borrow_mut().insert(ep);
    }
    let data = std::slice::from_raw_parts(data as *const u8, len).to_vec();
    shared
        .events
        .borrow_mut()
        .push(Event::Message { from, data });
    sys::UCS_OK
}

unsafe extern "C" fn on_error(arg: *mut c_void, ep: sys::Ep, status: sys::Status) {
    // SAFETY: arg is the worker's Shared (see on_message).
    let shared = &*(arg as *const Shared);
    let api = &*shared.api;
    let why = CStr::from_ptr((api.status_string)(status))
        .to_string_lossy()
        .into_owned();
    shared.events.borrow_mut().push(Event::Failed {
        ep: EpId(ep as usize),
        why,
    });
}

unsafe extern "C" fn on_connect(req: sys::ConnRequest, arg: *mut c_void) {
    // SAFETY: arg is the worker's Shared; req is UCX's pending connection.
    let shared = &*(arg as *const Shared);
    let api = &*shared.api;
    let base = ep_params(shared.err_mode, arg);
    let params = sys::EpParams {
        field_mask: base.field_mask | sys::UCP_EP_PARAM_FIELD_CONN_REQUEST,
        conn_request: req,
        ..base
    };
    let mut ep: sys::Ep = std::ptr::null_mut();
    let s = (api.ep_create)(shared.worker, &params, &mut ep);
    if s == sys::UCS_OK {
        shared.accepted.borrow_mut().insert(EpId(ep as usize));
        shared
            .events
            .borrow_mut()
            .push(Event::Accepted(EpId(ep as usize)));
    } else {
        let why = CStr::from_ptr((api.status_string)(s)).to_string_lossy();
        tracing::warn!(%why, "UCX: an incoming connection could not be accepted");
    }
}

fn zeroed_ep_params() -> sys::EpParams {
    // SAFETY: all-zero is a valid EpParams (null pointers, no fields selected).
    unsafe { std::mem::zeroed() }
}

/// What every endpoint of a worker shares, whichever way it reaches its peer: the worker's
/// error-handling mode, and `on_error` reporting a failure into the worker's events (`arg`:
/// its `Shared`). The caller adds the peer's address, connection request or socket.
fn ep_params(err_mode: std::ffi::c_int, arg: *mut c_void) -> sys::EpParams {
    sys::EpParams {
        field_mask: sys::UCP_EP_PARAM_FIELD_ERR_HANDLER | sys::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        err_mode,
        err_handler: sys::Handler {
            cb: Some(on_error),
            arg,
        },
        ..zeroed_ep_params()
    }
}

impl Worker {
    /// A context with active messages and one single-thread worker, in one of two modes:
    /// - `Mode::Events`: the worker can block on an event fd ([`Worker::event_fd`]), and a
    ///   peer that fails (killed, connection reset) is reported at once ([`Event::Failed`]);
    ///   UCX then uses only transports that raise events and detect peer failure (TCP, RDMA).
    /// - `Mode::Polled`: the owner polls; UCX may also use shared memory between processes of
    ///   one machine, whose transports do not report a failed peer (the owner learns of it
    ///   otherwise: the cluster's lease).
    pub fn new(mode: Mode) -> Result<Worker, Error> {
        Worker::create(mode, false)
    }

    /// [`Worker::new`] with one-sided writes as well ([`Worker::register`], [`Worker::put`]).
    /// Over transports without RMA in hardware (TCP) UCX carries the writes as messages.
    pub fn with_rma(mode: Mode) -> Result<Worker, Error> {
        Worker::create(mode, true)
    }

    fn create(mode: Mode, rma: bool) -> Result<Worker, Error> {
        let wakeup = mode == Mode::Events;
        let ucx = load()?;
        let api = &ucx.api;
        let mut config: sys::Config = std::ptr::null_mut();
        // SAFETY: UCX reads its UCX_* environment into a config it allocates.
        check(ucx, "config_read", unsafe {
            (api.config_read)(std::ptr::null(), std::ptr::null(), &mut config)
        })?;
        // A listener binds with SO_REUSEADDR (not SO_REUSEPORT): a node restarted at once on
        // its port would else fail "Address already in use" while the last run's
        // connections sit in TIME_WAIT (about 60 s). A second listener on a port in use is
        // still refused. UCX_TCP_CM_REUSEADDR / UCX_CM_REUSEADDR in the environment win.
        if std::env::var_os("UCX_TCP_CM_REUSEADDR").is_none()
            && std::env::var_os("UCX_CM_REUSEADDR").is_none()
        {
            // SAFETY: a config UCX allocated; two NUL-terminated strings. (A UCT setting is
            // kept by UCP and applied to the connection manager's configuration.)
            let s = unsafe { (api.config_modify)(config, REUSEADDR.as_ptr(), c"y".as_ptr()) };
            if s != sys::UCS_OK {
                tracing::warn!(status = s, "UCX: SO_REUSEADDR for listeners not set");
            }
        }
        // SAFETY: a zeroed Params selects no field; we then select features only.
        let mut params: sys::Params = unsafe { std::mem::zeroed() };
        params.field_mask = sys::UCP_PARAM_FIELD_FEATURES;
        params.features = sys::UCP_FEATURE_AM
            | if wakeup { sys::UCP_FEATURE_WAKEUP } else { 0 }
            | if rma { sys::UCP_FEATURE_RMA } else { 0 };
        let mut context: sys::Context = std::ptr::null_mut();
        // SAFETY: valid params and config; the context is ours to clean up.
        let s = unsafe {
            (api.init_version)(
                sys::UCP_API_MAJOR,
                sys::UCP_API_MINOR,
                &params,
                config,
                &mut context,
            )
        };
        // SAFETY: the config was read above and is no longer needed.
        unsafe { (api.config_release)(config) };
        check(ucx, "init", s)?;
        // SAFETY: zeroed WorkerParams select nothing; we select the thread mode.
        let mut wp: sys::WorkerParams = unsafe { std::mem::zeroed() };
        wp.field_mask = sys::UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = sys::UCS_THREAD_MODE_SINGLE;
        let mut worker: sys::Worker = std::ptr::null_mut();
        // SAFETY: a live context and valid params.
        if let Err(e) = check(ucx, "worker_create", unsafe {
            (api.worker_create)(context, &wp, &mut worker)
        }) {
            // SAFETY: the context made above, with nothing on it.
            unsafe { (api.cleanup)(context) };
            return Err(e);
        }
        let shared = Box::new(Shared {
            events: RefCell::new(Vec::new()),
            err_mode: if wakeup {
                sys::UCP_ERR_HANDLING_MODE_PEER
            } else {
                sys::UCP_ERR_HANDLING_MODE_NONE
            },
            worker,
            api: &ucx.api,
            accepted: RefCell::new(HashSet::new()),
            heard: RefCell::new(HashSet::new()),
        });
        let w = Worker {
            ucx,
            context,
            worker,
            listener: None,
            sweeper: None,
            dials: stalled::DialSweeper::default(),
            shared,
            eps: HashSet::new(),
            pending: Vec::new(),
            closing: Vec::new(),
            rma,
            regions: Vec::new(),
            rkeys: HashMap::new(),
            next_rkey: 0,
        };
        let hp = sys::AmHandlerParam {
            field_mask: sys::UCP_AM_HANDLER_PARAM_FIELD_ID
                | sys::UCP_AM_HANDLER_PARAM_FIELD_CB
                | sys::UCP_AM_HANDLER_PARAM_FIELD_ARG
                | sys::UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
            id: AM_ID,
            flags: sys::UCP_AM_FLAG_WHOLE_MSG,
            cb: Some(on_message),
            arg: w.shared_arg(),
        };
        // SAFETY: the handler's arg (Shared) lives as long as the worker (dropped after it).
        check(ucx, "set_am_recv_handler", unsafe {
            (api.set_am_recv_handler)(worker, &hp)
        })?;
        Ok(w)
    }

    fn shared_arg(&self) -> *mut c_void {
        &*self.shared as *const Shared as *mut c_void
    }

    /// Listens for peers on `addr` (port 0: any free port); returns the address bound.
    pub fn listen(&mut self, addr: SocketAddr) -> Result<SocketAddr, Error> {
        let (storage, len) = sockaddr(addr);
        let params = sys::ListenerParams {
            field_mask: sys::UCP_LISTENER_PARAM_FIELD_SOCK_ADDR
                | sys::UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
            sockaddr: sys::SockAddr {
                addr: &storage as *const _ as *const libc::sockaddr,
                addrlen: len,
            },
            accept_handler: sys::Handler {
                cb: None,
                arg: std::ptr::null_mut(),
            },
            conn_handler: sys::Handler {
                cb: Some(on_connect),
                arg: self.shared_arg(),
            },
        };
        let mut l: sys::Listener = std::ptr::null_mut();
        // SAFETY: valid params; the address storage outlives the call.
        check(self.ucx, "listener_create", unsafe {
            (self.ucx.api.listener_create)(self.worker, &params, &mut l)
        })?;
        self.listener = Some(l);
        // SAFETY: zeroed attr selects nothing; we ask for the bound address.
        let mut attr: sys::ListenerAttr = unsafe { std::mem::zeroed() };
        attr.field_mask = sys::UCP_LISTENER_ATTR_FIELD_SOCKADDR;
        check(self.ucx, "listener_query", unsafe {
            (self.ucx.api.listener_query)(l, &mut attr)
        })?;
        // SAFETY: UCX wrote a sockaddr of the family it says.
        let bound = unsafe {
            socket2::SockAddr::new(
                attr.sockaddr,
                std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
            )
        };
        let bound = bound.as_socket().ok_or(Error::Call {
            what: "listener_query",
            why: "not an IP address".into(),
        })?;
        self.sweeper = Some(stalled::Sweeper::new(bound.port()));
        Ok(bound)
    }

    /// Closes the listener's connections whose handshake cannot finish: a stranger's bytes
    /// make UCX's connection manager spin on them for good (`stalled`). The owner calls it
    /// often (its loop); it looks at most once a second. Returns how many it closed.
    pub fn sweep_stalled(&mut self) -> usize {
        self.sweeper.as_mut().map_or(0, |s| s.sweep())
    }

    /// Closes this worker's connections to peers it dialed ([`Worker::connect`]) whose
    /// handshake cannot finish: a stranger listening there that answers with bytes that are
    /// not UCX's makes UCX's connection manager spin on the socket as at a listener
    /// (`stalled`). Looks at most every 100 ms (a look reads this process's descriptors: the
    /// owner calls it while a dialed peer has yet to prove itself, not always). Returns the
    /// peers cut off; their endpoints fail or say nothing more, and are the owner's to close.
    pub fn sweep_dialed(&mut self) -> Vec<SocketAddr> {
        self.dials.sweep()
    }

    /// Connects to a listening peer. The connection completes in the background; sends made
    /// before then are queued by UCX.
    pub fn connect(&mut self, addr: SocketAddr) -> Result<EpId, Error> {
        self.dials.dialed(addr);
        let (storage, len) = sockaddr(addr);
        let base = ep_params(self.shared.err_mode, self.shared_arg());
        let params = sys::EpParams {
            field_mask: base.field_mask
                | sys::UCP_EP_PARAM_FIELD_FLAGS
                | sys::UCP_EP_PARAM_FIELD_SOCK_ADDR,
            flags: sys::UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
            sockaddr: sys::SockAddr {
                addr: &storage as *const _ as *const libc::sockaddr,
                addrlen: len,
            },
            ..base
        };
        // SAFETY: the address storage outlives the call.
        unsafe { self.create_ep(&params) }
    }

    /// This worker's address: every transport it can be reached by (shared memory among
    /// them), for a peer to connect with [`Worker::connect_address`].
    pub fn address(&self) -> Result<Vec<u8>, Error> {
        let mut addr: *mut c_void = std::ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: our worker; UCX allocates the address, released below after the copy.
        check(self.ucx, "worker_get_address", unsafe {
            (self.ucx.api.worker_get_address)(self.worker, &mut addr, &mut len)
        })?;
        // SAFETY: UCX wrote `len` bytes at `addr`.
        let out = unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec();
        // SAFETY: the address UCX gave above, released once.
        unsafe { (self.ucx.api.worker_release_address)(self.worker, addr) };
        Ok(out)
    }

    /// Connects to a peer by its worker address ([`Worker::address`]) rather than through its
    /// listener: UCX may then choose shared memory between processes of one machine.
    pub fn connect_address(&mut self, address: &[u8]) -> Result<EpId, Error> {
        let base = ep_params(self.shared.err_mode, self.shared_arg());
        let params = sys::EpParams {
            field_mask: base.field_mask | sys::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
            address: address.as_ptr() as *const c_void,
            ..base
        };
        // SAFETY: UCX copies what it needs of the address during the call.
        unsafe { self.create_ep(&params) }
    }

    /// An endpoint of ours from `params` (failures reported to this worker's events).
    ///
    /// # Safety
    /// Every pointer in `params` must be valid for the call.
    unsafe fn create_ep(&mut self, params: &sys::EpParams) -> Result<EpId, Error> {
        let mut ep: sys::Ep = std::ptr::null_mut();
        // SAFETY: our worker; the caller vouches for the params' pointers.
        check(self.ucx, "ep_create", unsafe {
            (self.ucx.api.ep_create)(self.worker, params, &mut ep)
        })?;
        let id = EpId(ep as usize);
        self.eps.insert(id);
        Ok(id)
    }

    /// Sends `data` as one message; `reply` gives the receiver this endpoint to answer on.
    /// The bytes are kept until UCX is done with them.
    pub fn send(&mut self, ep: EpId, data: Vec<u8>, reply: bool) -> Result<(), Error> {
        let param = sys::RequestParam {
            op_attr_mask: sys::UCP_OP_ATTR_FIELD_FLAGS,
            flags: sys::UCP_AM_SEND_FLAG_EAGER
                | if reply {
                    sys::UCP_AM_SEND_FLAG_REPLY
                } else {
                    0
                },
            // SAFETY (the rest): all-zero selects nothing.
            ..unsafe { std::mem::zeroed() }
        };
        // SAFETY: a live endpoint; `data` stays alive (moved into `pending`) until complete.
        let r = unsafe {
            (self.ucx.api.am_send_nbx)(
                ep.raw(),
                AM_ID,
                std::ptr::null(),
                0,
                data.as_ptr() as *const c_void,
                data.len(),
                &param,
            )
        };
        self.hold_until_sent("am_send", r, data)
    }

    /// What a send or put returned: done, or pending with `data` kept until it completes
    /// (freed in [`Worker::progress`]), or failed.
    fn hold_until_sent(
        &mut self,
        what: &'static str,
        r: sys::StatusPtr,
        data: Vec<u8>,
    ) -> Result<(), Error> {
        match ptr_status(r) {
            PtrStatus::Done => Ok(()),
            PtrStatus::Pending(req) => {
                self.pending.push((req, data));
                Ok(())
            }
            PtrStatus::Failed(s) => Err(Error::Call {
                what,
                why: status_string(self.ucx, s),
            }),
        }
    }

    /// Runs UCX's progress (sends, receives, connections); returns whether anything moved.
    /// The events it raised are taken with [`Worker::take_events`].
    pub fn progress(&mut self) -> bool {
        let mut any = false;
        // SAFETY: our worker, on its own thread.
        while unsafe { (self.ucx.api.worker_progress)(self.worker) } > 0 {
            any = true;
        }
        let api = &self.ucx.api;
        self.pending.retain(|(req, _)| {
            // SAFETY: a request UCX returned and we have not freed.
            let s = unsafe { (api.request_check_status)(*req) };
            if s == sys::UCS_INPROGRESS {
                return true;
            }
            if s != sys::UCS_OK {
                tracing::debug!(status = s, "UCX send ended with an error");
            }
            // SAFETY: complete, so ours to free.
            unsafe { (api.request_free)(*req) };
            false
        });
        self.closing.retain(|req| {
            // SAFETY: as above, for close requests.
            let s = unsafe { (api.request_check_status)(*req) };
            if s == sys::UCS_INPROGRESS {
                return true;
            }
            unsafe { (api.request_free)(*req) };
            false
        });
        any
    }

    /// The events raised since the last call, oldest first. A failed endpoint is closed here.
    pub fn take_events(&mut self) -> Vec<Event> {
        let events = std::mem::take(&mut *self.shared.events.borrow_mut());
        for e in &events {
            if let Event::Failed { ep, .. } = e {
                self.close(*ep);
            }
        }
        events
    }

    /// The fd that becomes readable when the worker has events (a worker made with `wakeup`).
    pub fn event_fd(&self) -> Result<std::os::fd::RawFd, Error> {
        let mut fd = -1;
        // SAFETY: our worker; UCX writes an fd it owns.
        check(self.ucx, "worker_get_efd", unsafe {
            (self.ucx.api.worker_get_efd)(self.worker, &mut fd)
        })?;
        Ok(fd)
    }

    /// Arms the event fd: true when the caller may block on it now, false when events are
    /// waiting already (progress again first).
    pub fn arm(&mut self) -> bool {
        // SAFETY: our worker, on its own thread.
        let s = unsafe { (self.ucx.api.worker_arm)(self.worker) };
        if s != sys::UCS_OK && s != sys::UCS_ERR_BUSY {
            tracing::debug!(status = s, "UCX worker_arm");
        }
        s == sys::UCS_OK
    }

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

    /// Sends not yet finished (each holds its bytes).
    pub fn sends_in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Closes an endpoint at once (what was queued on it is dropped). A reply endpoint (UCX's,
    /// not this worker's to close) loses the keys unpacked on it and is not heard from again.
    pub fn close(&mut self, ep: EpId) {
        self.shared.heard.borrow_mut().remove(&ep);
        // A key must go before the endpoint it was unpacked on (UCX's rule).
        let api = &self.ucx.api;
        self.rkeys.retain(|_, (on, rkey)| {
            if *on != ep {
                return true;
            }
            // SAFETY: a key unpacked on this endpoint, destroyed once.
            unsafe { (api.rkey_destroy)(*rkey) };
            false
        });
        let ours = self.eps.remove(&ep) || self.shared.accepted.borrow_mut().remove(&ep);
        if !ours {
            return;
        }
        let param = sys::RequestParam {
            op_attr_mask: sys::UCP_OP_ATTR_FIELD_FLAGS,
            flags: sys::UCP_EP_CLOSE_FLAG_FORCE,
            // SAFETY: all-zero selects nothing.
            ..unsafe { std::mem::zeroed() }
        };
        // SAFETY: a live endpoint of this worker, closed once (removed from our sets above).
        let r = unsafe { (self.ucx.api.ep_close_nbx)(ep.raw(), &param) };
        if let PtrStatus::Pending(req) = ptr_status(r) {
            self.closing.push(req);
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let eps: Vec<EpId> = self
            .eps
            .iter()
            .copied()
            .chain(self.shared.accepted.borrow().iter().copied())
            .collect();
        for ep in eps {
            self.close(ep);
        }
        let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while (!self.closing.is_empty() || !self.pending.is_empty())
            && std::time::Instant::now() < until
        {
            self.progress();
        }
        let api = &self.ucx.api;
        // SAFETY: each handle created by this worker, destroyed once, listener first.
        unsafe {
            if let Some(l) = self.listener.take() {
                (api.listener_destroy)(l);
            }
            for (req, _) in self.pending.drain(..) {
                (api.request_free)(req);
            }
            for r in self.regions.drain(..).flatten() {
                (api.mem_unmap)(self.context, r.memh);
            }
            (api.worker_destroy)(self.worker);
            (api.cleanup)(self.context);
        }
    }
}
