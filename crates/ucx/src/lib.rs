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
mod rma;
mod stalled;
pub mod sys;

pub use load::{load, Ucx};
pub use rma::{RegionId, RegionMemory, RemoteKey, MAX_KEY_BYTES, MAX_REGION_BYTES};

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

struct Region {
    ptr: *mut u8,
    len: usize,
    memh: sys::MemH,
    key: Vec<u8>,
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
