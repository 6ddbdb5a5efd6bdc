//! The bank's settings (`[services.bank]`, `--service-opt bank.KEY=VALUE`, and the serve
//! flags below).

use super::backend::Cohorts;
use super::besim::DEFAULT_USERS;
use super::store::Placement;
use cohort_service_api::config::named_enum;
use cohort_service_api::config::{text, ServiceConfig, ServiceFlag};
use serde::{Deserialize, Serialize};

named_enum! {
    /// The layout of the request and response slots in GPU memory.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Layout ("bank layout") {
        /// Transposed by 4-byte words (Rhythm: a warp's accesses coalesce).
        Transposed = "transposed",
        RowMajor = "row-major",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BankSettings {
    /// Users in the backend (1..=N; their records are a pure function of the user id).
    pub users: u32,
    /// GPU engines: slot layout.
    #[serde(with = "text")]
    pub layout: Layout,
    /// gpu-cohort: cohorts of any mix of page types, or of one type (Rhythm). Served, mixed is
    /// the default: with a dozen types one type's cohorts stay small and each pays a cohort's
    /// fixed cost (H200, 1024 connections: mixed p99 6.7 ms at 40K pages/s, one type per
    /// cohort p50 1 s; lab/results/bank-gpu-cohort*-c1024.json).
    #[serde(with = "text")]
    pub cohorts: Cohorts,
    /// Where the records live: computed, gpu, or memcached://HOST:PORT.
    #[serde(with = "text")]
    pub backend: Placement,
}

impl Default for BankSettings {
    fn default() -> Self {
        BankSettings {
            users: DEFAULT_USERS,
            layout: Layout::Transposed,
            cohorts: Cohorts::Mixed,
            backend: Placement::Computed,
        }
    }
}

impl ServiceConfig for BankSettings {
    fn check(&self) -> Result<(), String> {
        if self.users == 0 {
            return Err("users must be at least 1".into());
        }
        Ok(())
    }
}

/// The serve flags that set the bank's keys.
pub const FLAGS: &[ServiceFlag] = &[
    ServiceFlag {
        long: "bank-users",
        key: "users",
        help: "bank: users in its backend (1..=N; their records are a pure function of the \
               user id) [default: 1000000]",
        switch: false,
        example: "1000",
    },
    ServiceFlag {
        long: "bank-layout",
        key: "layout",
        help: "bank on the GPU engines: request and response slots transposed by 4-byte words \
               (Rhythm: a warp's accesses coalesce) or row-major [default: transposed]",
        switch: false,
        example: "row-major",
    },
    ServiceFlag {
        long: "bank-cohorts",
        key: "cohorts",
        help: "bank on gpu-cohort: cohorts of any mix of page types (mixed), or of one type \
               (type, Rhythm) [default: mixed]",
        switch: false,
        example: "type",
    },
    ServiceFlag {
        long: "bank-backend",
        key: "backend",
        help: "bank: where its records live: computed (from the user id, in process), gpu (hash \
               tables in GPU memory; GPU engines), or memcached://HOST:PORT (loaded at start-up \
               unless already there) [default: computed]",
        switch: false,
        example: "memcached://127.0.0.1:11211",
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_service_api::config::{settings, typed};

    #[test]
    fn settings_read_their_flags_values_and_refuse_bad_ones() {
        let s: BankSettings = typed(
            "bank",
            &settings(&[
                ("users", "50"),
                ("layout", "row-major"),
                ("cohorts", "type"),
                ("backend", "memcached://127.0.0.1:11211"),
            ]),
        )
        .unwrap();
        assert_eq!((s.users, s.layout), (50, Layout::RowMajor));
        assert_eq!(s.cohorts, Cohorts::ByType);
        assert_eq!(s.backend, Placement::Memcached("127.0.0.1:11211".into()));
        let e = |k: &str, v: &str| typed::<BankSettings>("bank", &settings(&[(k, v)])).unwrap_err();
        assert!(e("users", "0").contains("users must be at least 1"));
        assert!(e("layout", "diagonal").contains("unknown bank layout"));
        assert!(e("backend", "memcached://nohost").contains("unknown bank backend"));
        for f in FLAGS {
            let got = typed::<BankSettings>("bank", &settings(&[(f.key, f.example)]));
            assert!(got.is_ok(), "--{} {}: {got:?}", f.long, f.example);
        }
    }
}
