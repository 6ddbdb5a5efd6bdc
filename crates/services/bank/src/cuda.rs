//! The bank's constants and tables as CUDA source: prepended to its kernels so the GPU reads
//! the very limits, paths and parameter names the CPU twins use (one definition, in Rust).

use super::besim::{self, NAME};
use super::kinds::{Kind, Method, KINDS, PREFIX};
use super::page;
use super::parse::{params, Refusal, MAX_BODY, MAX_REQUEST, NUMS, TEXTS};
use super::record;
use cohort_gpu::Prelude;

/// `#define`s and `__constant__` tables for the bank kernels.
pub fn prelude() -> Prelude {
    let mut s = Prelude::new("crates/services/bank/src/cuda.rs");
    for (name, v) in [
        ("BANK_MAX_REQUEST", MAX_REQUEST),
        ("BANK_MAX_BODY", MAX_BODY),
        ("BANK_NUMS", NUMS),
        ("BANK_TEXTS", TEXTS),
        ("BANK_NAME", NAME),
        ("BANK_KINDS", KINDS.len()),
        ("BANK_PREFIX_LEN", PREFIX.len()),
    ] {
        s.define(name, v);
    }
    for r in Refusal::ALL {
        s.define(&format!("BANK_REFUSE_{r:?}"), r as u8);
    }
    s.strings("BANK_PREFIX", &[PREFIX]);
    let names: Vec<&str> = KINDS.iter().map(|k| k.name).collect();
    s.strings("BANK_KIND_NAME", &names);
    let post: Vec<u8> = KINDS
        .iter()
        .map(|k| (k.method == Method::Post) as u8)
        .collect();
    s.array("unsigned char", "BANK_KIND_POST", &post);
    // Parameter names: kind k's numeric parameter i is entry k * NUMS + i ("" when absent);
    // its text parameter i is entry k * TEXTS + i of the second table.
    let (mut nums, mut texts) = (Vec::new(), Vec::new());
    for k in Kind::all() {
        let (n, t) = params(k);
        nums.extend((0..NUMS).map(|i| n.get(i).copied().unwrap_or("")));
        texts.extend((0..TEXTS).map(|i| t.get(i).copied().unwrap_or("")));
    }
    s.strings("BANK_NUM_PARAM", &nums);
    s.strings("BANK_TEXT_PARAM", &texts);
    // Pages: sizes, the backend's word lists, refusal statuses and texts.
    for (name, v) in [
        ("BANK_MAX_ACCOUNTS", besim::MAX_ACCOUNTS as u64),
        ("BANK_MAX_PAYEES", besim::MAX_PAYEES as u64),
        ("BANK_TXNS", besim::TXNS_PER_ACCOUNT as u64),
        ("BANK_PAYMENTS", besim::PAYMENTS as u64),
        ("BANK_CHECK_BOX_CENTS", besim::CHECK_BOX_CENTS as u64),
        ("BANK_REFUSAL_PAGE", page::REFUSAL_PAGE_BYTES as u64),
        ("BANK_LENGTH_FIELD", page::LENGTH_FIELD as u64),
        ("BANK_RESP_SLOT", RESP_SLOT as u64),
    ] {
        s.define(name, format!("{v}ull"));
    }
    for k in Kind::all() {
        s.define(&format!("BANK_K_{k:?}"), k as u8);
    }
    // The record layout (bank/record.rs) and which types read records.
    for (name, at) in record::FIELDS.iter().chain(&record::PAYMENT_FIELDS) {
        s.define(&format!("BANK_REC_{name}"), at);
    }
    s.define("BANK_REC_NONE", "0xffffffffu");
    let reads: Vec<u8> = KINDS.iter().map(|k| (k.backend_calls > 0) as u8).collect();
    s.array("unsigned char", "BANK_KIND_RECORDS", &reads);
    let sizes: Vec<usize> = KINDS.iter().map(|k| k.page_bytes).collect();
    s.array("unsigned int", "BANK_KIND_PAGE", &sizes);
    s.strings("BANK_FIRST", &besim::FIRST);
    s.strings("BANK_LAST", &besim::LAST);
    s.strings("BANK_STREETS", &besim::STREETS);
    s.strings("BANK_CITIES", &besim::CITIES);
    s.strings("BANK_ACCOUNT_KINDS", &besim::ACCOUNT_KINDS);
    s.strings("BANK_MERCHANTS", &besim::MERCHANTS);
    s.strings("BANK_DESIGNS", &besim::CHECK_DESIGNS);
    s.strings("BANK_TAIL", &[std::str::from_utf8(page::TAIL).unwrap()]);
    // Refusal code c (1..) is entry c - 1; the entry after them is the 200 page's "OK".
    let mut reasons: Vec<&str> = Refusal::ALL.iter().map(|r| r.reason()).collect();
    s.define("BANK_REASON_OK", reasons.len());
    reasons.push("OK");
    s.strings("BANK_REASON", &reasons);
    let messages: Vec<&str> = Refusal::ALL.iter().map(|r| r.message()).collect();
    s.strings("BANK_MESSAGE", &messages);
    let statuses: Vec<u16> = Refusal::ALL.iter().map(|r| r.status()).collect();
    s.array("unsigned short", "BANK_STATUS", &statuses);
    s
}

/// Room for a response's status line and headers besides its body (the longest, a login's
/// with its Set-Cookie, is under 300 bytes).
pub const HEADER_ROOM: usize = 1024;
/// A response slot on the GPU: the largest page and its header (whole words, fewer than 2^16
/// of them: the pad kernel's word indices are 16-bit).
pub const RESP_SLOT: usize = super::kinds::MAX_PAGE_BYTES + HEADER_ROOM;
const _: () = assert!(RESP_SLOT.is_multiple_of(4) && RESP_SLOT / 4 < 1 << 16);
// A refusal page fits the response bound of any page type (the smallest page is 4 KB).
const _: () = assert!(super::page::REFUSAL_PAGE_BYTES <= 4 * 1024);

#[cfg(test)]
mod tests {
    #[test]
    fn prelude_names_every_kind() {
        let p = super::prelude().text().to_string();
        assert!(p.contains("#define BANK_MAX_REQUEST 2048"));
        assert!(p.contains("#define BANK_REFUSE_NotFound 2"));
        assert!(p.contains("BANK_KIND_NAME_OFF[15]"));
        assert!(p.contains("BANK_NUM_PARAM_OFF[43]"));
    }
}
