//! UCP's C declarations this crate calls, written out by hand from UCX 1.22's `ucp/api`
//! headers (no maintained Rust binding exists). Every struct's size and every field's offset
//! is checked against the headers by `tests/layout.rs` where the headers are installed.

use std::ffi::{c_char, c_int, c_uint, c_void};

pub type Status = i32; // ucs_status_t
pub type StatusPtr = *mut c_void; // ucs_status_ptr_t
pub type Context = *mut c_void; // ucp_context_h
pub type Config = *mut c_void; // ucp_config_t *
pub type Worker = *mut c_void; // ucp_worker_h
pub type Listener = *mut c_void; // ucp_listener_h
pub type Ep = *mut c_void; // ucp_ep_h
pub type ConnRequest = *mut c_void; // ucp_conn_request_h
pub type MemH = *mut c_void; // ucp_mem_h
pub type RKey = *mut c_void; // ucp_rkey_h

pub const UCS_OK: Status = 0;
pub const UCS_INPROGRESS: Status = 1;
/// `UCS_ERR_LAST`: a status pointer at or above this (as unsigned) is an error status.
pub const UCS_ERR_LAST: isize = -100;

pub const UCP_API_MAJOR: c_uint = 1;
pub const UCP_API_MINOR: c_uint = 22;

pub const UCP_PARAM_FIELD_FEATURES: u64 = 1 << 0;
pub const UCP_FEATURE_AM: u64 = 1 << 6;
pub const UCP_FEATURE_RMA: u64 = 1 << 1;
pub const UCP_MEM_MAP_PARAM_FIELD_ADDRESS: u64 = 1 << 0;
pub const UCP_MEM_MAP_PARAM_FIELD_LENGTH: u64 = 1 << 1;
pub const UCP_MEM_MAP_PARAM_FIELD_FLAGS: u64 = 1 << 2;
pub const UCP_MEM_MAP_PARAM_FIELD_PROT: u64 = 1 << 3;
pub const UCP_MEM_MAP_ALLOCATE: c_uint = 1 << 1;
pub const UCP_MEM_ATTR_FIELD_ADDRESS: u64 = 1 << 0;
pub const UCP_MEM_ATTR_FIELD_LENGTH: u64 = 1 << 1;
pub const UCP_MEM_MAP_PROT_LOCAL_READ: c_uint = 1 << 0;
pub const UCP_MEM_MAP_PROT_LOCAL_WRITE: c_uint = 1 << 1;
pub const UCP_MEM_MAP_PROT_REMOTE_READ: c_uint = 1 << 8;
pub const UCP_MEM_MAP_PROT_REMOTE_WRITE: c_uint = 1 << 9;
pub const UCP_FEATURE_WAKEUP: u64 = 1 << 4;
pub const UCS_ERR_BUSY: Status = -15;
pub const UCP_WORKER_PARAM_FIELD_THREAD_MODE: u64 = 1 << 0;
pub const UCS_THREAD_MODE_SINGLE: c_int = 0;
pub const UCP_LISTENER_PARAM_FIELD_SOCK_ADDR: u64 = 1 << 0;
pub const UCP_LISTENER_PARAM_FIELD_CONN_HANDLER: u64 = 1 << 2;
pub const UCP_LISTENER_ATTR_FIELD_SOCKADDR: u64 = 1 << 0;
pub const UCP_EP_PARAM_FIELD_REMOTE_ADDRESS: u64 = 1 << 0;
pub const UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE: u64 = 1 << 1;
pub const UCP_EP_PARAM_FIELD_ERR_HANDLER: u64 = 1 << 2;
pub const UCP_EP_PARAM_FIELD_SOCK_ADDR: u64 = 1 << 4;
pub const UCP_EP_PARAM_FIELD_FLAGS: u64 = 1 << 5;
pub const UCP_EP_PARAM_FIELD_CONN_REQUEST: u64 = 1 << 6;
pub const UCP_EP_PARAMS_FLAGS_CLIENT_SERVER: c_uint = 1 << 0;
pub const UCP_ERR_HANDLING_MODE_NONE: c_int = 0;
pub const UCP_ERR_HANDLING_MODE_PEER: c_int = 1;
pub const UCP_EP_CLOSE_FLAG_FORCE: u32 = 1 << 0;
pub const UCP_AM_HANDLER_PARAM_FIELD_ID: u64 = 1 << 0;
pub const UCP_AM_HANDLER_PARAM_FIELD_FLAGS: u64 = 1 << 1;
pub const UCP_AM_HANDLER_PARAM_FIELD_CB: u64 = 1 << 2;
pub const UCP_AM_HANDLER_PARAM_FIELD_ARG: u64 = 1 << 3;
pub const UCP_AM_FLAG_WHOLE_MSG: u32 = 1 << 0;
pub const UCP_AM_SEND_FLAG_REPLY: u32 = 1 << 0;
pub const UCP_AM_SEND_FLAG_EAGER: u32 = 1 << 1;
pub const UCP_AM_RECV_ATTR_FIELD_REPLY_EP: u64 = 1 << 0;
pub const UCP_AM_RECV_ATTR_FLAG_RNDV: u64 = 1 << 17;
pub const UCP_OP_ATTR_FIELD_FLAGS: u32 = 1 << 4;

/// `ucs_cpu_set_t`: UCS_CPU_SETSIZE (1024) bits.
pub const CPU_SET_WORDS: usize = 1024 / 64;

#[repr(C)]
pub struct Params {
    pub field_mask: u64,
    pub features: u64,
    pub request_size: usize,
    pub request_init: *const c_void,
    pub request_cleanup: *const c_void,
    pub tag_sender_mask: u64,
    pub mt_workers_shared: c_int,
    pub estimated_num_eps: usize,
    pub estimated_num_ppn: usize,
    pub name: *const c_char,
    pub node_local_id: usize,
}

#[repr(C)]
pub struct WorkerParams {
    pub field_mask: u64,
    pub thread_mode: c_int,
    pub cpu_mask: [u64; CPU_SET_WORDS],
    pub events: c_uint,
    pub user_data: *mut c_void,
    pub event_fd: c_int,
    pub flags: u64,
    pub name: *const c_char,
    pub am_alignment: usize,
    pub client_id: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct SockAddr {
    pub addr: *const libc::sockaddr,
    pub addrlen: libc::socklen_t,
}

pub type ConnCallback = unsafe extern "C" fn(ConnRequest, *mut c_void);
pub type ErrCallback = unsafe extern "C" fn(*mut c_void, Ep, Status);
pub type AmRecvCallback = unsafe extern "C" fn(
    *mut c_void,
    *const c_void,
    usize,
    *mut c_void,
    usize,
    *const AmRecvParam,
) -> Status;

#[repr(C)]
pub struct Handler<F> {
    pub cb: Option<F>,
    pub arg: *mut c_void,
}

#[repr(C)]
pub struct ListenerParams {
    pub field_mask: u64,
    pub sockaddr: SockAddr,
    pub accept_handler: Handler<unsafe extern "C" fn(Ep, *mut c_void)>,
    pub conn_handler: Handler<ConnCallback>,
}

#[repr(C)]
pub struct ListenerAttr {
    pub field_mask: u64,
    pub sockaddr: libc::sockaddr_storage,
}

#[repr(C)]
pub struct EpParams {
    pub field_mask: u64,
    pub address: *const c_void,
    pub err_mode: c_int,
    pub err_handler: Handler<ErrCallback>,
    pub user_data: *mut c_void,
    pub flags: c_uint,
    pub sockaddr: SockAddr,
    pub conn_request: ConnRequest,
    pub name: *const c_char,
    pub local_sockaddr: SockAddr,
}

#[repr(C)]
pub struct RequestParam {
    pub op_attr_mask: u32,
    pub flags: u32,
    pub request: *mut c_void,
    pub cb: *const c_void,
    pub datatype: u64,
    pub user_data: *mut c_void,
    pub reply_buffer: *mut c_void,
    pub memory_type: c_int,
    pub recv_info: *mut c_void,
    pub memh: *mut c_void,
    pub remote_datatype: u64,
    pub remote: *const c_void,
    pub remote_count: usize,
}

/// `ucp_mem_map_params_t`.
#[repr(C)]
pub struct MemMapParams {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub flags: c_uint,
    pub prot: c_uint,
    pub memory_type: c_int,
    pub exported_memh_buffer: *const c_void,
}

/// `ucp_mem_attr_t`.
#[repr(C)]
pub struct MemAttr {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub mem_type: c_int,
}

#[repr(C)]
pub struct AmHandlerParam {
    pub field_mask: u64,
    pub id: c_uint,
    pub flags: u32,
    pub cb: Option<AmRecvCallback>,
    pub arg: *mut c_void,
}

#[repr(C)]
pub struct AmRecvParam {
    pub recv_attr: u64,
    pub reply_ep: Ep,
}

/// The functions, resolved from the loaded libraries.
pub struct Api {
    pub config_read: unsafe extern "C" fn(*const c_char, *const c_char, *mut Config) -> Status,
    pub config_release: unsafe extern "C" fn(Config),
    pub config_modify: unsafe extern "C" fn(Config, *const c_char, *const c_char) -> Status,
    pub init_version:
        unsafe extern "C" fn(c_uint, c_uint, *const Params, Config, *mut Context) -> Status,
    pub cleanup: unsafe extern "C" fn(Context),
    pub worker_create: unsafe extern "C" fn(Context, *const WorkerParams, *mut Worker) -> Status,
    pub worker_destroy: unsafe extern "C" fn(Worker),
    pub worker_progress: unsafe extern "C" fn(Worker) -> c_uint,
    pub worker_get_efd: unsafe extern "C" fn(Worker, *mut c_int) -> Status,
    pub worker_arm: unsafe extern "C" fn(Worker) -> Status,
    pub worker_get_address: unsafe extern "C" fn(Worker, *mut *mut c_void, *mut usize) -> Status,
    pub worker_release_address: unsafe extern "C" fn(Worker, *mut c_void),
    pub listener_create:
        unsafe extern "C" fn(Worker, *const ListenerParams, *mut Listener) -> Status,
    pub listener_destroy: unsafe extern "C" fn(Listener),
    pub listener_query: unsafe extern "C" fn(Listener, *mut ListenerAttr) -> Status,
    pub ep_create: unsafe extern "C" fn(Worker, *const EpParams, *mut Ep) -> Status,
    pub ep_close_nbx: unsafe extern "C" fn(Ep, *const RequestParam) -> StatusPtr,
    pub set_am_recv_handler: unsafe extern "C" fn(Worker, *const AmHandlerParam) -> Status,
    pub am_send_nbx: unsafe extern "C" fn(
        Ep,
        c_uint,
        *const c_void,
        usize,
        *const c_void,
        usize,
        *const RequestParam,
    ) -> StatusPtr,
    pub mem_map: unsafe extern "C" fn(Context, *const MemMapParams, *mut MemH) -> Status,
    pub mem_unmap: unsafe extern "C" fn(Context, MemH) -> Status,
    pub mem_query: unsafe extern "C" fn(MemH, *mut MemAttr) -> Status,
    /// `ucp_rkey_pack` (ucp_compat.h in 1.22): the remote key of a mapped region.
    pub rkey_pack: unsafe extern "C" fn(Context, MemH, *mut *mut c_void, *mut usize) -> Status,
    pub rkey_buffer_release: unsafe extern "C" fn(*mut c_void),
    pub ep_rkey_unpack: unsafe extern "C" fn(Ep, *const c_void, *mut RKey) -> Status,
    pub rkey_destroy: unsafe extern "C" fn(RKey),
    pub put_nbx:
        unsafe extern "C" fn(Ep, *const c_void, usize, u64, RKey, *const RequestParam) -> StatusPtr,
    pub worker_fence: unsafe extern "C" fn(Worker) -> Status,
    pub request_check_status: unsafe extern "C" fn(*mut c_void) -> Status,
    pub request_free: unsafe extern "C" fn(*mut c_void),
    pub status_string: unsafe extern "C" fn(Status) -> *const c_char,
}

/// What a `ucs_status_ptr_t` holds.
pub enum PtrStatus {
    Done,
    Pending(*mut c_void),
    Failed(Status),
}

pub fn ptr_status(p: StatusPtr) -> PtrStatus {
    let v = p as isize;
    if p.is_null() {
        PtrStatus::Done
    } else if (UCS_ERR_LAST..0).contains(&v) {
        PtrStatus::Failed(v as Status)
    } else {
        PtrStatus::Pending(p)
    }
}
