//! The bank's constants and tables as CUDA source: prepended to its kernels so the GPU reads
//! the very limits, paths and parameter names the CPU twins use (one definition, in Rust).

use super::besim::{self, NAME};
use super::kinds::{Kind, Method, KINDS, PREFIX};
use super::page;
use super::parse::{params, Refusal, MAX_BODY, MAX_REQUEST, NUMS, TEXTS};
use super::record;
use cohort_gpu::Prelude;
use std::fmt::Write;

/// `#define`s and `__constant__` tables for the bank kernels.
pub fn prelude() -> Prelude {
    let mut s = Prelude::new("crates/services/src/bank/cuda.rs");
    for (name, v) in [
        ("BANK_MAX_REQUEST", MAX_REQUEST),
        ("BANK_MAX_BODY", MAX_BODY),
        ("BANK_NUMS", NUMS),
        ("BANK_TEXTS", TEXTS),
        ("BANK_NAME", NAME),
        ("BANK_KINDS", KINDS.len()),
        ("BANK_PREFIX_LEN", PREFIX.len()),
    ] {
        writeln!(s, "#define {name} {v}").unwrap();
    }
    for r in Refusal::ALL {
        writeln!(s, "#define BANK_REFUSE_{:?} {}", r, r as u8).unwrap();
    }
    // Strings as one byte array with offsets: [start, end) of entry i at off[i], off[i + 1].
    let table = |s: &mut Prelude, name: &str, items: &[&str]| {
        let mut bytes = Vec::new();
        let mut offs = vec![0usize];
        for it in items {
            bytes.extend_from_slice(it.as_bytes());
            offs.push(bytes.len());
        }
        bytes.push(0);
        let list = |v: &mut Prelude, xs: &mut dyn Iterator<Item = String>| {
            v.write_str(&xs.collect::<Vec<_>>().join(","))
                .expect("writing to a String");
        };
        write!(
            s,
            "__constant__ unsigned char {name}_BYTES[{}] = {{",
            bytes.len()
        )
        .unwrap();
        list(s, &mut bytes.iter().map(|b| b.to_string()));
        writeln!(s, "}};").unwrap();
        write!(
            s,
            "__constant__ unsigned short {name}_OFF[{}] = {{",
            offs.len()
        )
        .unwrap();
        list(s, &mut offs.iter().map(|b| b.to_string()));
        writeln!(s, "}};").unwrap();
    };
    table(&mut s, "BANK_PREFIX", &[PREFIX]);
    let names: Vec<&str> = KINDS.iter().map(|k| k.name).collect();
    table(&mut s, "BANK_KIND_NAME", &names);
    let methods: Vec<String> = KINDS
        .iter()
        .map(|k| ((k.method == Method::Post) as u8).to_string())
        .collect();
    writeln!(
        s,
        "__constant__ unsigned char BANK_KIND_POST[{}] = {{{}}};",
        KINDS.len(),
        methods.join(",")
    )
    .unwrap();
    // Parameter names: kind k's numeric parameter i is entry k * NUMS + i ("" when absent);
    // its text parameter i is entry k * TEXTS + i of the second table.
    let (mut nums, mut texts) = (Vec::new(), Vec::new());
    for k in Kind::all() {
        let (n, t) = params(k);
        nums.extend((0..NUMS).map(|i| n.get(i).copied().unwrap_or("")));
        texts.extend((0..TEXTS).map(|i| t.get(i).copied().unwrap_or("")));
    }
    table(&mut s, "BANK_NUM_PARAM", &nums);
    table(&mut s, "BANK_TEXT_PARAM", &texts);
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
        writeln!(s, "#define {name} {v}ull").unwrap();
    }
    for k in Kind::all() {
        writeln!(s, "#define BANK_K_{:?} {}", k, k as u8).unwrap();
    }
    // The record layout (bank/record.rs) and which types read records.
    for (name, at) in record::FIELDS.iter().chain(&record::PAYMENT_FIELDS) {
        writeln!(s, "#define BANK_REC_{name} {at}").unwrap();
    }
    writeln!(s, "#define BANK_REC_NONE 0xffffffffu").unwrap();
    let reads: Vec<String> = KINDS
        .iter()
        .map(|k| ((k.backend_calls > 0) as u8).to_string())
        .collect();
    writeln!(
        s,
        "__constant__ unsigned char BANK_KIND_RECORDS[{}] = {{{}}};",
        KINDS.len(),
        reads.join(",")
    )
    .unwrap();
    let sizes: Vec<String> = KINDS.iter().map(|k| k.page_bytes.to_string()).collect();
    writeln!(
        s,
        "__constant__ unsigned int BANK_KIND_PAGE[{}] = {{{}}};",
        KINDS.len(),
        sizes.join(",")
    )
    .unwrap();
    table(&mut s, "BANK_FIRST", &besim::FIRST);
    table(&mut s, "BANK_LAST", &besim::LAST);
    table(&mut s, "BANK_STREETS", &besim::STREETS);
    table(&mut s, "BANK_CITIES", &besim::CITIES);
    table(&mut s, "BANK_ACCOUNT_KINDS", &besim::ACCOUNT_KINDS);
    table(&mut s, "BANK_MERCHANTS", &besim::MERCHANTS);
    table(&mut s, "BANK_DESIGNS", &besim::CHECK_DESIGNS);
    table(
        &mut s,
        "BANK_TAIL",
        &[std::str::from_utf8(page::TAIL).unwrap()],
    );
    // Refusal code c (1..) is entry c - 1; the entry after them is the 200 page's "OK".
    let mut reasons: Vec<&str> = Refusal::ALL.iter().map(|r| r.reason()).collect();
    writeln!(s, "#define BANK_REASON_OK {}", reasons.len()).unwrap();
    reasons.push("OK");
    table(&mut s, "BANK_REASON", &reasons);
    let messages: Vec<&str> = Refusal::ALL.iter().map(|r| r.message()).collect();
    table(&mut s, "BANK_MESSAGE", &messages);
    let statuses: Vec<String> = Refusal::ALL
        .iter()
        .map(|r| r.status().to_string())
        .collect();
    writeln!(
        s,
        "__constant__ unsigned short BANK_STATUS[{}] = {{{}}};",
        statuses.len(),
        statuses.join(",")
    )
    .unwrap();
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
