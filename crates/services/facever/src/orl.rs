//! The ORL faces (40 people x 10 images, 92x112 PGM) as the service uses them: halved to
//! [`lbp::WIDTH`] x [`lbp::HEIGHT`], and split per person into enrolment images (their mean
//! histogram is the reference stored in memcached), training probes (the threshold is chosen
//! on them) and held-out probes (what accuracy is reported on and the load generator sends).

use super::lbp::{self, IMAGE_BYTES};
use std::io::Read;
use std::ops::Range;
use std::path::Path;

pub const IMAGES_PER_PERSON: usize = 10;
/// Which of a person's images (0-based) play which part.
pub const ENROL: Range<usize> = 0..3;
pub const TRAIN_PROBES: Range<usize> = 3..5;
pub const HELD_OUT: Range<usize> = 5..10;

/// Every person's images, person-major. Person ids are 1..=people.
#[derive(Debug, Clone)]
pub struct Faces {
    pub people: u32,
    pub pixels: Vec<u8>,
}

impl Faces {
    /// Person `person`'s image `i` (0-based).
    pub fn image(&self, person: u32, i: usize) -> &[u8] {
        assert!((1..=self.people).contains(&person) && i < IMAGES_PER_PERSON);
        let at = ((person as usize - 1) * IMAGES_PER_PERSON + i) * IMAGE_BYTES;
        &self.pixels[at..at + IMAGE_BYTES]
    }

    /// Person `person`'s reference: the mean histogram of their enrolment images.
    pub fn reference(&self, person: u32, table: &[u8; 256]) -> lbp::Histogram {
        let hists: Vec<_> = ENROL
            .map(|i| lbp::histogram(self.image(person, i), table))
            .collect();
        lbp::mean(&hists)
    }
}

/// The ten people built in (ORL s1..s10, testdata/README.md).
pub fn embedded() -> Faces {
    let gz: &[u8] = include_bytes!("testdata/orl-s1-s10-46x56.bin.gz");
    let mut pixels = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut pixels)
        .expect("the built-in faces decompress");
    assert_eq!(pixels.len(), 10 * IMAGES_PER_PERSON * IMAGE_BYTES);
    Faces { people: 10, pixels }
}

/// An ORL folder (`s1/1.pgm` .. `sN/10.pgm`, N the subjects present from s1 on), or the
/// built-in ten when `dir` is None.
pub fn load(dir: Option<&Path>) -> Result<Faces, String> {
    let Some(dir) = dir else {
        return Ok(embedded());
    };
    let mut pixels = Vec::new();
    let mut people = 0u32;
    while dir.join(format!("s{}", people + 1)).is_dir() {
        people += 1;
        for i in 1..=IMAGES_PER_PERSON {
            let path = dir.join(format!("s{people}/{i}.pgm"));
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let (w, h, px) = read_pgm(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
            pixels.extend(lbp::halve(px, w, h).map_err(|e| format!("{}: {e}", path.display()))?);
        }
    }
    if people < 2 {
        return Err(format!(
            "{}: not an ORL faces folder (s1/1.pgm .. s2/10.pgm at least)",
            dir.display()
        ));
    }
    Ok(Faces { people, pixels })
}

/// A binary 8-bit PGM (P5): width, height and the pixels.
pub fn read_pgm(bytes: &[u8]) -> Result<(usize, usize, &[u8]), String> {
    // Header: "P5", width, height, maxval, separated by whitespace (and # comments), then
    // one whitespace byte and the pixels.
    let mut fields = Vec::new();
    let mut at = 0;
    while fields.len() < 4 {
        while at < bytes.len() && (bytes[at].is_ascii_whitespace() || bytes[at] == b'#') {
            if bytes[at] == b'#' {
                while at < bytes.len() && bytes[at] != b'\n' {
                    at += 1;
                }
            } else {
                at += 1;
            }
        }
        let start = at;
        while at < bytes.len() && !bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        if start == at {
            return Err("a truncated PGM header".into());
        }
        fields.push(std::str::from_utf8(&bytes[start..at]).unwrap_or(""));
    }
    if fields[0] != "P5" {
        return Err("not a binary PGM (P5)".into());
    }
    let num = |s: &str| {
        s.parse::<usize>()
            .map_err(|_| format!("bad PGM field {s:?}"))
    };
    let (w, h, max) = (num(fields[1])?, num(fields[2])?, num(fields[3])?);
    if max > 255 {
        return Err("a 16-bit PGM (8-bit faces expected)".into());
    }
    let px = bytes.get(at + 1..).unwrap_or(&[]);
    if w == 0 || h == 0 || px.len() < w * h {
        return Err(format!("a {w}x{h} PGM with {} pixel bytes", px.len()));
    }
    Ok((w, h, &px[..w * h]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgm_headers_in_either_layout_read() {
        for hdr in [
            "P5 4 2 255\n",
            "P5\n4 2\n255\n",
            "P5\n# made here\n4 2\n255\n",
        ] {
            let mut b = hdr.as_bytes().to_vec();
            b.extend(1..=8u8);
            let (w, h, px) = read_pgm(&b).unwrap();
            assert_eq!((w, h, px), (4, 2, &[1, 2, 3, 4, 5, 6, 7, 8][..]));
        }
        for bad in [
            &b"P6 4 2 255\n"[..],
            b"P5 4 2",
            b"P5 4 2 255\n123",
            b"P5 x 2 255\n",
        ] {
            assert!(read_pgm(bad).is_err());
        }
    }

    #[test]
    fn the_built_in_faces_are_ten_people() {
        let f = embedded();
        assert_eq!(f.people, 10);
        assert_ne!(f.image(1, 0), f.image(2, 0));
    }

    /// Where the ORL folder is beside the repository, the built-in faces are its first ten
    /// people, halved.
    #[test]
    fn the_built_in_faces_match_the_orl_folder_when_present() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../../shared/data/orl_faces");
        if !dir.is_dir() {
            // Straight to stderr, as scripts/test.sh counts it (libtest keeps eprintln!).
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED orl built-in faces: no ORL folder at {}",
                dir.display()
            );
            return;
        }
        let full = load(Some(&dir)).unwrap();
        assert_eq!(full.people, 40);
        assert_eq!(
            &full.pixels[..embedded().pixels.len()],
            &embedded().pixels[..]
        );
    }
}
