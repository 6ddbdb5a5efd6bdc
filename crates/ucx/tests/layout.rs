//! The hand-written declarations in `sys` against UCX's own headers: a C program built with
//! the installed headers prints every struct's size and the offset of every field Cohort
//! declares, and each must equal Rust's. Skips (and says so) where no headers are installed.

use cohort_ucx::sys;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;

fn include_dir() -> Option<PathBuf> {
    let dir = cohort_ucx::load().ok()?.lib_dir.clone()?;
    let inc = dir.parent()?.join("include");
    inc.join("ucp/api/ucp.h").exists().then_some(inc)
}

macro_rules! fields {
    ($rust:ty, $c:literal, [$($f:ident),*]) => {
        vec![
            (concat!("sizeof(", $c, ")").to_string(), size_of::<$rust>()),
            $((concat!("offsetof(", $c, ", ", stringify!($f), ")").to_string(),
               offset_of!($rust, $f)),)*
        ]
    };
}

#[test]
fn declarations_match_the_headers() {
    let Some(inc) = include_dir() else {
        if std::env::var_os("COHORT_REQUIRE_UCX").is_some() {
            panic!("COHORT_REQUIRE_UCX is set and no UCX headers were found");
        }
        report_skip("no UCX headers beside the loaded library");
        return;
    };
    let mut want = Vec::new();
    want.extend(fields!(
        sys::Params,
        "ucp_params_t",
        [
            field_mask,
            features,
            request_size,
            request_init,
            request_cleanup,
            tag_sender_mask,
            mt_workers_shared,
            estimated_num_eps,
            estimated_num_ppn,
            name,
            node_local_id
        ]
    ));
    want.extend(fields!(
        sys::WorkerParams,
        "ucp_worker_params_t",
        [
            field_mask,
            thread_mode,
            cpu_mask,
            events,
            user_data,
            event_fd,
            flags,
            name,
            am_alignment,
            client_id
        ]
    ));
    want.extend(fields!(sys::SockAddr, "ucs_sock_addr_t", [addr, addrlen]));
    want.extend(fields!(
        sys::ListenerParams,
        "ucp_listener_params_t",
        [field_mask, sockaddr, accept_handler, conn_handler]
    ));
    want.extend(fields!(
        sys::ListenerAttr,
        "ucp_listener_attr_t",
        [field_mask, sockaddr]
    ));
    want.extend(fields!(
        sys::EpParams,
        "ucp_ep_params_t",
        [
            field_mask,
            address,
            err_mode,
            err_handler,
            user_data,
            flags,
            sockaddr,
            conn_request,
            name,
            local_sockaddr
        ]
    ));
    want.extend(fields!(
        sys::RequestParam,
        "ucp_request_param_t",
        [
            op_attr_mask,
            flags,
            request,
            cb,
            datatype,
            user_data,
            reply_buffer,
            memory_type,
            recv_info,
            memh,
            remote_datatype,
            remote,
            remote_count
        ]
    ));
    want.extend(fields!(
        sys::AmHandlerParam,
        "ucp_am_handler_param_t",
        [field_mask, id, flags, cb, arg]
    ));
    want.extend(fields!(
        sys::MemMapParams,
        "ucp_mem_map_params_t",
        [
            field_mask,
            address,
            length,
            flags,
            prot,
            memory_type,
            exported_memh_buffer
        ]
    ));
    want.extend(fields!(
        sys::MemAttr,
        "ucp_mem_attr_t",
        [field_mask, address, length, mem_type]
    ));
    want.extend(fields!(
        sys::AmRecvParam,
        "ucp_am_recv_param_t",
        [recv_attr, reply_ep]
    ));
    // The constants, by value.
    let consts: Vec<(String, i64)> = [
        ("UCP_API_MAJOR", sys::UCP_API_MAJOR as i64),
        ("UCP_API_MINOR", sys::UCP_API_MINOR as i64),
        (
            "UCP_PARAM_FIELD_FEATURES",
            sys::UCP_PARAM_FIELD_FEATURES as i64,
        ),
        ("UCP_FEATURE_AM", sys::UCP_FEATURE_AM as i64),
        ("UCP_FEATURE_RMA", sys::UCP_FEATURE_RMA as i64),
        (
            "UCP_MEM_MAP_PARAM_FIELD_ADDRESS",
            sys::UCP_MEM_MAP_PARAM_FIELD_ADDRESS as i64,
        ),
        (
            "UCP_MEM_MAP_PARAM_FIELD_LENGTH",
            sys::UCP_MEM_MAP_PARAM_FIELD_LENGTH as i64,
        ),
        (
            "UCP_MEM_MAP_PARAM_FIELD_PROT",
            sys::UCP_MEM_MAP_PARAM_FIELD_PROT as i64,
        ),
        (
            "UCP_MEM_MAP_PARAM_FIELD_FLAGS",
            sys::UCP_MEM_MAP_PARAM_FIELD_FLAGS as i64,
        ),
        ("UCP_MEM_MAP_ALLOCATE", sys::UCP_MEM_MAP_ALLOCATE as i64),
        (
            "UCP_MEM_ATTR_FIELD_ADDRESS",
            sys::UCP_MEM_ATTR_FIELD_ADDRESS as i64,
        ),
        (
            "UCP_MEM_ATTR_FIELD_LENGTH",
            sys::UCP_MEM_ATTR_FIELD_LENGTH as i64,
        ),
        (
            "UCP_MEM_MAP_PROT_LOCAL_READ",
            sys::UCP_MEM_MAP_PROT_LOCAL_READ as i64,
        ),
        (
            "UCP_MEM_MAP_PROT_LOCAL_WRITE",
            sys::UCP_MEM_MAP_PROT_LOCAL_WRITE as i64,
        ),
        (
            "UCP_MEM_MAP_PROT_REMOTE_READ",
            sys::UCP_MEM_MAP_PROT_REMOTE_READ as i64,
        ),
        (
            "UCP_MEM_MAP_PROT_REMOTE_WRITE",
            sys::UCP_MEM_MAP_PROT_REMOTE_WRITE as i64,
        ),
        ("UCP_FEATURE_WAKEUP", sys::UCP_FEATURE_WAKEUP as i64),
        ("UCS_ERR_BUSY", sys::UCS_ERR_BUSY as i64),
        (
            "UCP_WORKER_PARAM_FIELD_THREAD_MODE",
            sys::UCP_WORKER_PARAM_FIELD_THREAD_MODE as i64,
        ),
        ("UCS_THREAD_MODE_SINGLE", sys::UCS_THREAD_MODE_SINGLE as i64),
        (
            "UCP_LISTENER_PARAM_FIELD_SOCK_ADDR",
            sys::UCP_LISTENER_PARAM_FIELD_SOCK_ADDR as i64,
        ),
        (
            "UCP_LISTENER_PARAM_FIELD_CONN_HANDLER",
            sys::UCP_LISTENER_PARAM_FIELD_CONN_HANDLER as i64,
        ),
        (
            "UCP_LISTENER_ATTR_FIELD_SOCKADDR",
            sys::UCP_LISTENER_ATTR_FIELD_SOCKADDR as i64,
        ),
        (
            "UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE",
            sys::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE as i64,
        ),
        (
            "UCP_EP_PARAM_FIELD_ERR_HANDLER",
            sys::UCP_EP_PARAM_FIELD_ERR_HANDLER as i64,
        ),
        (
            "UCP_EP_PARAM_FIELD_SOCK_ADDR",
            sys::UCP_EP_PARAM_FIELD_SOCK_ADDR as i64,
        ),
        (
            "UCP_EP_PARAM_FIELD_FLAGS",
            sys::UCP_EP_PARAM_FIELD_FLAGS as i64,
        ),
        (
            "UCP_EP_PARAM_FIELD_CONN_REQUEST",
            sys::UCP_EP_PARAM_FIELD_CONN_REQUEST as i64,
        ),
        (
            "UCP_EP_PARAMS_FLAGS_CLIENT_SERVER",
            sys::UCP_EP_PARAMS_FLAGS_CLIENT_SERVER as i64,
        ),
        (
            "UCP_ERR_HANDLING_MODE_PEER",
            sys::UCP_ERR_HANDLING_MODE_PEER as i64,
        ),
        (
            "UCP_EP_CLOSE_FLAG_FORCE",
            sys::UCP_EP_CLOSE_FLAG_FORCE as i64,
        ),
        (
            "UCP_AM_HANDLER_PARAM_FIELD_ID",
            sys::UCP_AM_HANDLER_PARAM_FIELD_ID as i64,
        ),
        (
            "UCP_AM_HANDLER_PARAM_FIELD_FLAGS",
            sys::UCP_AM_HANDLER_PARAM_FIELD_FLAGS as i64,
        ),
        (
            "UCP_AM_HANDLER_PARAM_FIELD_CB",
            sys::UCP_AM_HANDLER_PARAM_FIELD_CB as i64,
        ),
        (
            "UCP_AM_HANDLER_PARAM_FIELD_ARG",
            sys::UCP_AM_HANDLER_PARAM_FIELD_ARG as i64,
        ),
        ("UCP_AM_FLAG_WHOLE_MSG", sys::UCP_AM_FLAG_WHOLE_MSG as i64),
        ("UCP_AM_SEND_FLAG_REPLY", sys::UCP_AM_SEND_FLAG_REPLY as i64),
        ("UCP_AM_SEND_FLAG_EAGER", sys::UCP_AM_SEND_FLAG_EAGER as i64),
        (
            "UCP_AM_RECV_ATTR_FIELD_REPLY_EP",
            sys::UCP_AM_RECV_ATTR_FIELD_REPLY_EP as i64,
        ),
        (
            "UCP_AM_RECV_ATTR_FLAG_RNDV",
            sys::UCP_AM_RECV_ATTR_FLAG_RNDV as i64,
        ),
        (
            "UCP_OP_ATTR_FIELD_FLAGS",
            sys::UCP_OP_ATTR_FIELD_FLAGS as i64,
        ),
        ("UCS_OK", sys::UCS_OK as i64),
        ("UCS_INPROGRESS", sys::UCS_INPROGRESS as i64),
        ("UCS_ERR_LAST", sys::UCS_ERR_LAST as i64),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    let dir = std::env::temp_dir().join(format!("cohort-ucx-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <ucp/api/ucp.h>\nint main(void) {\n",
    );
    for (expr, _) in &want {
        c += &format!("  printf(\"%zu\\n\", (size_t){expr});\n");
    }
    for (name, _) in &consts {
        c += &format!("  printf(\"%lld\\n\", (long long){name});\n");
    }
    c += "  return 0;\n}\n";
    std::fs::write(dir.join("layout.c"), c).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = std::process::Command::new(&cc)
        .arg("-I")
        .arg(&inc)
        .arg(dir.join("layout.c"))
        .arg("-o")
        .arg(dir.join("layout"))
        .status()
        .unwrap_or_else(|e| panic!("{cc}: {e}"));
    assert!(built.success(), "the layout program did not compile");
    let out = std::process::Command::new(dir.join("layout"))
        .output()
        .unwrap();
    let got: Vec<i64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    std::fs::remove_dir_all(&dir).ok();
    let mut wrong = Vec::new();
    for ((expr, rust), c) in want.iter().zip(&got) {
        if *rust as i64 != *c {
            wrong.push(format!("{expr}: Rust {rust}, C {c}"));
        }
    }
    for ((name, rust), c) in consts.iter().zip(&got[want.len()..]) {
        if rust != c {
            wrong.push(format!("{name}: Rust {rust}, C {c}"));
        }
    }
    assert_eq!(got.len(), want.len() + consts.len());
    assert!(
        wrong.is_empty(),
        "declarations differ from UCX's headers:\n{}",
        wrong.join("\n")
    );
}

/// Says on the real stderr that the running test skipped, and why (`SKIPPED TEST: REASON`,
/// which scripts/test.sh counts as a skip, not a pass): libtest keeps a passing test's
/// `eprintln!` to itself, so the skip would not show. libtest names a test's thread after it.
fn report_skip(reason: &str) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {reason}");
}
