//! Finding and opening libucp at run time: the binary builds and runs without UCX, and a
//! cluster role that needs it says where it looked.

use crate::sys::Api;
use crate::Error;
use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The opened libraries and their functions, for the life of the process (UCX is not
/// unloaded: its modules and memory hooks stay registered).
pub struct Ucx {
    pub(crate) api: Api,
    pub lib_dir: Option<PathBuf>,
    _libs: Vec<Library>,
}

static LOADED: OnceLock<Result<Ucx, String>> = OnceLock::new();

/// Opens UCX once: from `COHORT_UCX_LIB` (a folder holding `libucp.so.0`), else from the
/// `libucx` Python wheel (`pip install libucx-cu13`), else the system's `libucp.so.0`.
pub fn load() -> Result<&'static Ucx, Error> {
    LOADED
        .get_or_init(open)
        .as_ref()
        .map_err(|e| Error::Load(e.clone()))
}

fn wheel_dir() -> Option<PathBuf> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import libucx, os; print(os.path.join(os.path.dirname(libucx.__file__), 'lib'))",
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let dir = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (out.status.success() && dir.join("libucp.so.0").exists()).then_some(dir)
}

fn open() -> Result<Ucx, String> {
    let dir = match std::env::var_os("COHORT_UCX_LIB") {
        Some(d) => {
            let d = PathBuf::from(d);
            if !d.join("libucp.so.0").exists() {
                return Err(format!(
                    "COHORT_UCX_LIB={} holds no libucp.so.0",
                    d.display()
                ));
            }
            Some(d)
        }
        None => wheel_dir(),
    };
    // In the order the wheel's own loader uses (libucs pulls libucm through its run path),
    // global, so the transport modules UCX loads from lib/ucx resolve against these copies.
    let names = ["libucs.so.0", "libuct.so.0", "libucp.so.0"];
    let mut libs = Vec::new();
    for n in names {
        let path = match &dir {
            Some(d) => d.join(n),
            None => Path::new(n).to_path_buf(),
        };
        // SAFETY: UCX's initialisers run here; they only register UCX's own state.
        let lib = unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_GLOBAL) }.map_err(|e| {
            format!(
                "UCX not found ({e}); install it with `pip install libucx-cu13` or point \
                 COHORT_UCX_LIB at a folder holding libucp.so.0"
            )
        })?;
        libs.push(lib);
    }
    let ucs = &libs[0];
    let ucp = &libs[2];
    macro_rules! sym {
        ($lib:expr, $name:literal) => {
            // SAFETY: the declared type is UCX 1.22's (checked by tests/layout.rs).
            *unsafe { $lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("UCX lacks {}: {e}", $name))?
        };
    }
    let api = Api {
        config_read: sym!(ucp, "ucp_config_read"),
        config_release: sym!(ucp, "ucp_config_release"),
        config_modify: sym!(ucp, "ucp_config_modify"),
        init_version: sym!(ucp, "ucp_init_version"),
        cleanup: sym!(ucp, "ucp_cleanup"),
        worker_create: sym!(ucp, "ucp_worker_create"),
        worker_destroy: sym!(ucp, "ucp_worker_destroy"),
        worker_progress: sym!(ucp, "ucp_worker_progress"),
        worker_get_efd: sym!(ucp, "ucp_worker_get_efd"),
        worker_arm: sym!(ucp, "ucp_worker_arm"),
        worker_get_address: sym!(ucp, "ucp_worker_get_address"),
        worker_release_address: sym!(ucp, "ucp_worker_release_address"),
        listener_create: sym!(ucp, "ucp_listener_create"),
        listener_destroy: sym!(ucp, "ucp_listener_destroy"),
        listener_query: sym!(ucp, "ucp_listener_query"),
        ep_create: sym!(ucp, "ucp_ep_create"),
        ep_close_nbx: sym!(ucp, "ucp_ep_close_nbx"),
        set_am_recv_handler: sym!(ucp, "ucp_worker_set_am_recv_handler"),
        am_send_nbx: sym!(ucp, "ucp_am_send_nbx"),
        mem_map: sym!(ucp, "ucp_mem_map"),
        mem_query: sym!(ucp, "ucp_mem_query"),
        mem_unmap: sym!(ucp, "ucp_mem_unmap"),
        rkey_pack: sym!(ucp, "ucp_rkey_pack"),
        rkey_buffer_release: sym!(ucp, "ucp_rkey_buffer_release"),
        ep_rkey_unpack: sym!(ucp, "ucp_ep_rkey_unpack"),
        rkey_destroy: sym!(ucp, "ucp_rkey_destroy"),
        put_nbx: sym!(ucp, "ucp_put_nbx"),
        worker_fence: sym!(ucp, "ucp_worker_fence"),
        request_check_status: sym!(ucp, "ucp_request_check_status"),
        request_free: sym!(ucp, "ucp_request_free"),
        status_string: sym!(ucs, "ucs_status_string"),
    };
    Ok(Ucx {
        api,
        lib_dir: dir,
        _libs: libs,
    })
}
