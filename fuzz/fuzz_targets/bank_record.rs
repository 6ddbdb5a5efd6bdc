#![no_main]
use cohort_services::bank::record::{self, Records};
use cohort_services::bank::{kinds::Kind, page, parse};
use libfuzzer_sys::fuzz_target;

// A user's record as memcached hands it over: any bytes are refused or render every page at
// its exact size, never a panic. Short inputs are laid over a good record, so the fuzzer
// reaches the fields past the size check.
fuzz_target!(|data: &[u8]| {
    let mut b = record::of(1 + data.first().copied().unwrap_or(0) as u32);
    if data.len() == record::BYTES {
        b.copy_from_slice(data);
    } else if data.len() > 2 {
        let at = u16::from_le_bytes([data[0], data[1]]) as usize % record::BYTES;
        let n = (data.len() - 2).min(record::BYTES - at);
        b[at..at + n].copy_from_slice(&data[2..2 + n]);
    }
    if !record::valid(&b) {
        return;
    }
    let mut out = Vec::new();
    for kind in Kind::all() {
        let info = kind.info();
        let req = match info.method {
            cohort_services::bank::kinds::Method::Get => {
                format!("GET /bank/{} HTTP/1.1\r\n\r\n", info.name)
            }
            cohort_services::bank::kinds::Method::Post => {
                format!("POST /bank/{} HTTP/1.1\r\nContent-Length: 0\r\n\r\n", info.name)
            }
        };
        // Pages whose parameters are missing are refused by the parser; the rest render.
        if let Ok(p) = parse::parse(req.as_bytes()) {
            page::render(&p, Records::Stored(&b), page::SessionChange::None, &mut out);
            assert!(out.ends_with(b"</body></html>\n"));
        }
    }
});
