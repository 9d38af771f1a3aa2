//! A seeded generator of RESP replies for the readers' tests (`resp::parse` and
//! `resp::Scan`, the pool's [`Wire`](crate::wire::stream::Wire), the listener's
//! [`Frames`](crate::transport::listener::Frames)): valid frames, the same truncated, garbled (bytes
//! changed, inserted, dropped) or glued together, and hostile ones (huge announced lengths
//! and counts, nesting past the limit, numbers that overflow, endless lines). Each reader
//! is fed every input split at every byte boundary (or at random boundaries for long
//! ones); none may panic, all must agree with one parse of the whole input, and none may
//! hold more memory than the bytes received call for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use redlease_core::Reply;

use crate::wire::resp::{self, Scan, Scanned};

/// SplitMix64: a small seeded generator (no dependency).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Headers that announce more than ever arrives, or that no reader may accept.
const HOSTILE: &[&[u8]] = &[
    b"$999999999999\r\n",
    b"$536870912\r\n",
    b"$536870000\r\nabc",
    b"$536870913\r\n",
    b"*2147483647\r\n",
    b"*1048576\r\n:1\r\n",
    b"*1048577\r\n",
    b"*9223372036854775807\r\n",
    b"$99999999999999999999999\r\n",
    b":-9223372036854775808\r\n",
    b":9223372036854775808\r\n",
    b"$-2\r\n",
    b"*-7\r\n",
    b"$+5\r\nhello\r\n",
    b"$\r\n",
    b"*\r\n",
    b"$ 5\r\nhello\r\n",
    b"$5\r\nhelloXY",
    b"$5\nhello\r\n",
    b"%2\r\n",
    b"_\r\n",
    b"\r\n",
    b"+\r\r\r\n",
];

/// One valid frame, nested at most `depth` more levels.
pub(crate) fn valid(rng: &mut Rng, depth: usize) -> Vec<u8> {
    let mut out = Vec::new();
    match rng.below(if depth == 0 { 5 } else { 7 }) {
        0 => {
            out.push(b'+');
            let n = rng.below(12);
            out.extend((0..n).map(|_| b"OKQUEUED abc"[rng.below(12)]));
            out.extend(b"\r\n");
        }
        1 => out.extend(b"-ERR something went wrong\r\n"),
        2 => out.extend(format!(":{}\r\n", rng.next() as i64 >> rng.below(64)).as_bytes()),
        3 => {
            let n = [0, 1, 2, 5, 40, 300][rng.below(6)];
            out.extend(format!("${n}\r\n").as_bytes());
            // Any bytes, CR and LF included.
            out.extend((0..n).map(|_| rng.next() as u8));
            out.extend(b"\r\n");
        }
        4 => out.extend(if rng.below(2) == 0 {
            &b"$-1\r\n"[..]
        } else {
            &b"*-1\r\n"[..]
        }),
        _ => {
            let n = rng.below(5);
            out.extend(format!("*{n}\r\n").as_bytes());
            for _ in 0..n {
                out.extend(valid(rng, depth - 1));
            }
        }
    }
    out
}

/// `n` levels of one-element arrays around an integer.
pub(crate) fn nested(n: usize) -> Vec<u8> {
    let mut f = b"*1\r\n".repeat(n);
    f.extend(b":1\r\n");
    f
}

/// `count` inputs from `seed`: valid frames (several glued together), truncated, garbled
/// and hostile ones, and nesting at and past the limit.
pub(crate) fn inputs(seed: u64, count: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(seed);
    let mut all = vec![nested(16), nested(17), nested(100_000)];
    all.extend(HOSTILE.iter().map(|h| h.to_vec()));
    while all.len() < count {
        let mut f = valid(&mut rng, 4);
        match rng.below(6) {
            // Valid, possibly with more frames after it.
            0 => {
                for _ in 0..rng.below(3) {
                    f.extend(valid(&mut rng, 3));
                }
            }
            // Truncated.
            1 if !f.is_empty() => f.truncate(rng.below(f.len())),
            // Garbled: a byte changed (often to one that means something in RESP).
            2 if !f.is_empty() => {
                let i = rng.below(f.len());
                f[i] = b"\r\n*$:+-0189\xff"[rng.below(12)];
            }
            // Garbled: a byte inserted or dropped.
            3 if !f.is_empty() => {
                let i = rng.below(f.len());
                if rng.below(2) == 0 {
                    f.insert(i, b"\r\n*$:-9"[rng.below(7)]);
                } else {
                    f.remove(i);
                }
            }
            // A hostile header inside a valid array, or after a valid frame.
            4 => {
                let h = HOSTILE[rng.below(HOSTILE.len())];
                if rng.below(2) == 0 {
                    let mut g = b"*2\r\n:1\r\n".to_vec();
                    g.extend(h);
                    f = g;
                } else {
                    f.extend(h);
                }
            }
            // Noise made of RESP's own bytes.
            _ => {
                f = (0..rng.below(64))
                    .map(|_| b"*$:+-\r\n0123456789x"[rng.below(18)])
                    .collect();
            }
        }
        all.push(f);
    }
    all
}

/// What one parse of the whole input gives: its frames in order, and whether it then ends
/// in an error (`true`) or in an incomplete frame or nothing (`false`).
pub(crate) fn frames_of(input: &[u8]) -> (Vec<Reply>, bool) {
    let mut frames = Vec::new();
    let mut at = 0;
    loop {
        match resp::parse(&input[at..]) {
            Ok(Some((frame, used))) => {
                frames.push(frame);
                at += used;
            }
            Ok(None) => return (frames, false),
            Err(_) => return (frames, true),
        }
    }
}

/// Cut points for `input`: every byte boundary for a short one, some at random for a
/// long one (always with its end).
pub(crate) fn cuts(rng: &mut Rng, input: &[u8]) -> Vec<usize> {
    if input.len() <= 512 {
        return (0..=input.len()).collect();
    }
    let mut cuts: Vec<usize> = (0..64).map(|_| rng.below(input.len() + 1)).collect();
    cuts.extend([0, 1, input.len()]);
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// The seed: fixed, unless `REDLEASE_FUZZ_SEED` names one (printed, to replay a failure).
pub(crate) fn seed() -> u64 {
    let seed = std::env::var("REDLEASE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0026);
    println!("RESP fuzz seed {seed} (REDLEASE_FUZZ_SEED to replay)");
    seed
}

/// `parse` and `Scan` never panic on any prefix of any input, and agree on each: both
/// incomplete (the scan asking for more than has arrived), both complete with the same
/// length, or both refusing it.
#[test]
fn parse_and_scan_agree_on_every_prefix_of_generated_replies() {
    let seed = seed();
    let mut rng = Rng::new(seed ^ 1);
    let inputs = inputs(seed, 3000);
    let mut judged = 0usize;
    for input in &inputs {
        let mut scan = Scan::default();
        for cut in cuts(&mut rng, input) {
            let prefix = &input[..cut];
            let parsed = resp::parse(prefix);
            let scanned = scan.advance(prefix);
            judged += 1;
            match (&parsed, &scanned) {
                (Ok(None), Ok(Scanned::NeedsAtLeast(n))) => assert!(*n > cut, "{input:?}"),
                (Ok(Some((_, used))), Ok(Scanned::Complete(len))) => {
                    assert_eq!(used, len, "{input:?} cut at {cut}");
                    break;
                }
                (Err(_), Err(_)) => break,
                _ => panic!("{input:?} cut at {cut}: parse {parsed:?}, scan {scanned:?}"),
            }
        }
    }
    println!("{} inputs, {judged} prefixes judged", inputs.len());
    assert!(judged > inputs.len());
}
