#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

// The bank's HTTP parser (the CPU twin of the GPU parser) and the whole service behind it:
// any bytes get one framed HTTP answer, never a panic.
fuzz_target!(|data: &[u8]| {
    if let Ok(p) = cohort_services::bank::parse::parse(data) {
        assert!(data.len() <= cohort_services::bank::parse::MAX_REQUEST);
        let _ = p.kind.info();
    }
    static BANK: OnceLock<cohort_services::bank::Bank> = OnceLock::new();
    let bank = BANK.get_or_init(|| {
        cohort_services::bank::Bank::new(&cohort_services::bank::BankConfig {
            users: 100,
            max_sessions: 100,
            secret: 1,
        })
    });
    let mut out = Vec::new();
    bank.serve(data, &mut out);
    assert!(out.starts_with(b"HTTP/1.1 "));
    assert!(out.windows(4).any(|w| w == b"\r\n\r\n"));
});
