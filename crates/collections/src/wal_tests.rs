use super::*;
use proptest::prelude::*;

fn log_of(groups: &[Vec<Vec<u8>>]) -> (Vec<u8>, Vec<usize>) {
    let (mut out, mut ends, mut seq) = (Vec::new(), Vec::new(), 1u64);
    for g in groups {
        let refs: Vec<&[u8]> = g.iter().map(Vec::as_slice).collect();
        out.extend(encode(seq, &refs));
        seq += g.len() as u64;
        ends.push(out.len());
    }
    (out, ends)
}

fn groups() -> impl Strategy<Value = Vec<Vec<Vec<u8>>>> {
    proptest::collection::vec(
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..4),
        1..8,
    )
}

proptest! {
    /// A log cut anywhere reads back as the whole records before the cut, numbered in order.
    #[test]
    fn a_log_cut_anywhere_keeps_its_whole_records(g in groups(), cut in any::<proptest::sample::Index>()) {
        let (bytes, ends) = log_of(&g);
        let cut = cut.index(bytes.len() + 1);
        let r = parse(&bytes[..cut]).unwrap();
        let whole = ends.iter().filter(|&&e| e <= cut).count();
        let want: Vec<Vec<u8>> = g[..whole].iter().flatten().cloned().collect();
        prop_assert_eq!(r.writes.iter().map(|w| w.1.clone()).collect::<Vec<_>>(), want);
        prop_assert!(r.writes.iter().enumerate().all(|(i, w)| w.0 == i as u64 + 1));
        prop_assert_eq!(r.good_len as usize, if whole == 0 { 0 } else { ends[whole - 1] });
        prop_assert_eq!(r.torn as usize, cut - r.good_len as usize);
    }

    /// A flipped bit in the last record is a torn tail; in an earlier one, damage refused.
    #[test]
    fn a_flipped_bit_is_cut_at_the_tail_and_refused_before_it(g in groups(), at in any::<proptest::sample::Index>(), bit in 0u8..8) {
        let (mut bytes, ends) = log_of(&g);
        let i = at.index(bytes.len());
        bytes[i] ^= 1 << bit;
        let rec = ends.iter().position(|&e| i < e).unwrap();
        match parse(&bytes) {
            Ok(r) => {
                prop_assert_eq!(rec, ends.len() - 1, "damage in record {} taken as a torn tail", rec);
                prop_assert_eq!(r.good_len as usize, if rec == 0 { 0 } else { ends[rec - 1] });
            }
            Err(e) => {
                prop_assert!(rec < ends.len() - 1, "a torn tail refused: {}", e);
                prop_assert!(e.message.contains("log damaged"), "{}", e);
            }
        }
    }
}

#[test]
fn a_torn_tail_is_cut_on_open_and_appends_follow_the_whole_records() {
    let dir = std::env::temp_dir().join(format!("cohort-wal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("wal");
    let _ = std::fs::remove_file(&path);
    let (mut w, r) = Wal::open(&path, "t").unwrap();
    assert!(r.writes.is_empty());
    w.append(&encode(1, &[b"one"])).unwrap();
    w.append(&encode(2, &[b"two", b"three"])).unwrap();
    let whole = w.len();
    drop(w);
    // A crash in the middle of the next append.
    let half = &encode(4, &[b"four"])[..9];
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(half).unwrap();
    drop(f);
    let (mut w, r) = Wal::open(&path, "t").unwrap();
    assert_eq!(r.torn, 9);
    assert_eq!(r.writes.len(), 3);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
    w.append(&encode(4, &[b"four"])).unwrap();
    drop(w);
    let (_, r) = Wal::open(&path, "t").unwrap();
    assert_eq!(r.writes.last().unwrap(), &(4, b"four".to_vec()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_full_disk_refuses_the_write_and_keeps_the_log() {
    // /dev/full answers every write with ENOSPC: a real full disk.
    let Ok(f) = OpenOptions::new().read(true).write(true).open("/dev/full") else {
        eprintln!("skipped: no /dev/full");
        return;
    };
    let mut w = Wal::from_file(f);
    let e = w.append(&encode(1, &[b"x"])).unwrap_err();
    assert_eq!(e.kind, Kind::Storage, "{e}");
    assert!(e.message.contains("No space left"), "{e}");
    assert_eq!(w.len(), 0);
}
