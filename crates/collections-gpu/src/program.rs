//! A filter (`cohort_collections::filter::Compiled`, keywords already resolved to codes) as
//! the stack program the device runs per slot (`eval_program` in kernels/collection.cu), and
//! that program's CPU twin (`Program::matches`), which the tests hold to `Compiled::matches`.
//!
//! The stack holds booleans as the bits of one 32-bit register: a leaf pushes its result,
//! `not` replaces the top, `and`/`or` fold the top two. `all [a, b, c]` is emitted as
//! `true a and b and c and`, so the stack never holds more than two values a nesting level:
//! the filter depth limit (16) keeps it well inside 32 bits; deeper programs are refused
//! (the CPU answers them).

use crate::kernels::{kind, op, Instr};
use cohort_collections::columns::{Column, NO_CODE};
use cohort_collections::filter::{Bounds, Compiled, Num};

/// The most booleans the stack may hold.
const STACK_BITS: usize = 32;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Program {
    pub code: Vec<Instr>,
    /// IN values, sorted per instruction: codes and integers as their bits, floats as
    /// their IEEE total-order keys (`total_key`).
    pub table: Vec<u64>,
}

/// A double's key in IEEE total order: keys are equal exactly when the bits are, as
/// `f64::total_cmp` compares (the kernels' `total_key`).
pub fn total_key(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | (1 << 63)
    }
}

impl Program {
    /// The program of `f` over `cols` (the columns it was compiled against), or `None` when
    /// the device cannot run it as the CPU does: a stack deeper than a register, or a
    /// range over an integer column with a float bound (the schema never makes one).
    pub fn compile(f: &Compiled, cols: &[Column]) -> Option<Program> {
        let mut p = Program::default();
        let depth = p.emit(f, cols, 0)?;
        (depth <= STACK_BITS).then_some(p)
    }

    /// Emits `f` with `depth` values already on the stack; answers the deepest the stack got.
    fn emit(&mut self, f: &Compiled, cols: &[Column], depth: usize) -> Option<usize> {
        let leaf = |p: &mut Program, i: Instr| {
            p.code.push(i);
            Some(depth + 1)
        };
        match f {
            Compiled::Codes(a, codes) => {
                let at = self.values(codes.iter().map(|&c| c as u64));
                leaf(self, set(op::IN_CODE, *a, at, codes.len()))
            }
            Compiled::Ints(a, xs) => {
                let at = self.values(xs.iter().map(|&x| x as u64));
                // Sorted as i64 (the kernel compares them signed): `xs` is.
                leaf(self, set(op::IN_INT, *a, at, xs.len()))
            }
            Compiled::Floats(a, xs) => {
                let mut keys: Vec<u64> = xs.iter().map(|&x| total_key(x)).collect();
                keys.sort_unstable();
                let at = self.values(keys.into_iter());
                leaf(self, set(op::IN_FLOAT, *a, at, xs.len()))
            }
            Compiled::Range(a, b) => {
                let i = range(*a, b, cols.get(*a)?)?;
                leaf(self, i)
            }
            Compiled::All(fs) | Compiled::Any(fs) => {
                let (start, fold) = match f {
                    Compiled::All(_) => (op::TRUE, op::AND),
                    _ => (op::FALSE, op::OR),
                };
                self.code.push(plain(start));
                let mut deepest = depth + 1;
                for c in fs {
                    deepest = deepest.max(self.emit(c, cols, depth + 1)?);
                    self.code.push(plain(fold));
                }
                Some(deepest)
            }
            Compiled::Not(c) => {
                let deepest = self.emit(c, cols, depth)?;
                self.code.push(plain(op::NOT));
                Some(deepest)
            }
        }
    }

    fn values(&mut self, vs: impl Iterator<Item = u64>) -> u64 {
        let at = self.table.len() as u64;
        self.table.extend(vs);
        at
    }

    /// Runs the program for one slot over host columns: the kernel's `eval_program`, step
    /// for step.
    pub fn matches(&self, cols: &[Column], slot: usize) -> bool {
        let mut stack: u32 = 0;
        for i in &self.code {
            let vals = || &self.table[i.v[0] as usize..i.v[0] as usize + i.n as usize];
            let r = match i.op {
                op::TRUE => true,
                op::FALSE => false,
                op::AND | op::OR => {
                    let b = stack & 1 == 1;
                    stack >>= 1;
                    let a = stack & 1 == 1;
                    stack >>= 1;
                    if i.op == op::AND {
                        a && b
                    } else {
                        a || b
                    }
                }
                op::NOT => {
                    let a = stack & 1 == 1;
                    stack >>= 1;
                    !a
                }
                op::IN_CODE => match &cols[i.col as usize] {
                    Column::Keyword { codes, .. } => {
                        let c = codes[slot];
                        c != NO_CODE && vals().binary_search(&(c as u64)).is_ok()
                    }
                    _ => false,
                },
                op::IN_INT => match &cols[i.col as usize] {
                    Column::Int(c) => c[slot]
                        .is_some_and(|x| vals().binary_search_by(|&v| (v as i64).cmp(&x)).is_ok()),
                    _ => false,
                },
                op::IN_FLOAT => match &cols[i.col as usize] {
                    Column::Float(c) => {
                        c[slot].is_some_and(|x| vals().binary_search(&total_key(x)).is_ok())
                    }
                    _ => false,
                },
                op::RANGE_INT => match &cols[i.col as usize] {
                    Column::Int(c) => c[slot].is_some_and(|x| in_range(x, i, |v| v as i64)),
                    _ => false,
                },
                op::RANGE_FLOAT => match &cols[i.col as usize] {
                    Column::Float(c) => c[slot].is_some_and(|x| in_range(x, i, f64::from_bits)),
                    _ => false,
                },
                other => unreachable!("opcode {other} is not emitted"),
            };
            stack = (stack << 1) | r as u32;
        }
        stack & 1 == 1
    }
}

fn plain(o: u32) -> Instr {
    Instr {
        op: o,
        ..Instr::default()
    }
}

fn set(o: u32, col: usize, at: u64, n: usize) -> Instr {
    Instr {
        op: o,
        col: col as u32,
        n: n as u32,
        v: [at, 0, 0, 0],
        ..Instr::default()
    }
}

/// A range over an integer or a float column. The schema gives a column and its bounds one
/// type (a float column's integer bound arrives as a float); an integer bound on a float
/// column is widened to f64 as `Num::cmp` does; a float bound on an integer column is left
/// to the CPU (`None`); a keyword column matches no range (an empty `in`).
fn range(col: usize, b: &Bounds, c: &Column) -> Option<Instr> {
    let bounds = [b.gt, b.gte, b.lt, b.lte];
    let ints = match c {
        Column::Int(_) if bounds.iter().flatten().all(|n| matches!(n, Num::I(_))) => true,
        Column::Int(_) => return None,
        Column::Float(_) => false,
        Column::Keyword { .. } => return Some(set(op::IN_CODE, col, 0, 0)),
    };
    let mut i = Instr {
        op: if ints { op::RANGE_INT } else { op::RANGE_FLOAT },
        col: col as u32,
        ..Instr::default()
    };
    for (j, bound) in bounds.iter().enumerate() {
        if let Some(n) = bound {
            i.flags |= 1 << j;
            i.v[j] = match (ints, n) {
                (true, Num::I(x)) => *x as u64,
                (_, Num::I(x)) => (*x as f64).to_bits(),
                (_, Num::F(x)) => x.to_bits(),
            };
        }
    }
    Some(i)
}

fn in_range<T: PartialOrd + Copy>(x: T, i: &Instr, of: impl Fn(u64) -> T) -> bool {
    let b = |j: usize| of(i.v[j]);
    (i.flags & 1 == 0 || x > b(0))
        && (i.flags & 2 == 0 || x >= b(1))
        && (i.flags & 4 == 0 || x < b(2))
        && (i.flags & 8 == 0 || x <= b(3))
}

/// The column kind a `ColDesc` names.
pub fn kind_of(c: &Column) -> u32 {
    match c {
        Column::Int(_) => kind::INT,
        Column::Float(_) => kind::FLOAT,
        Column::Keyword { .. } => kind::KEYWORD,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_collections::filter::Filter;
    use cohort_collections::schema::AttrValue;
    use proptest::prelude::*;

    /// Columns of `n` slots: an integer, a float and a keyword one, values sometimes missing
    /// and drawn from small ranges so that filters hit them.
    fn columns(n: usize, seed: u64) -> Vec<Column> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut ints = Column::new(cohort_collections::AttrType::Integer);
        let mut floats = Column::new(cohort_collections::AttrType::Float);
        let mut words = Column::new(cohort_collections::AttrType::Keyword);
        for _ in 0..n {
            let some = |rng: &mut rand::rngs::StdRng| rng.gen_bool(0.8);
            let i = some(&mut rng).then(|| AttrValue::Int(rng.gen_range(-4..4) * (1 << 40)));
            // -0.0 and 0.0 both appear: `in` tells them apart (total order), ranges do not.
            let f = some(&mut rng).then(|| {
                let x = rng.gen_range(-4..4) as f64 * 0.5;
                AttrValue::Float(if x == 0.0 && rng.gen_bool(0.5) {
                    -0.0
                } else {
                    x
                })
            });
            let w = some(&mut rng)
                .then(|| AttrValue::Keyword(["a", "b", "c"][rng.gen_range(0..3)].into()));
            ints.push(i.as_ref());
            floats.push(f.as_ref());
            words.push(w.as_ref());
        }
        vec![ints, floats, words]
    }

    fn leaf() -> impl Strategy<Value = Filter> {
        let int = (-5i64..5).prop_map(|x| AttrValue::Int(x * (1 << 40)));
        let float = prop_oneof![
            (-5i32..5).prop_map(|x| AttrValue::Float(x as f64 * 0.5)),
            Just(AttrValue::Float(-0.0))
        ];
        let word = prop_oneof![Just("a"), Just("b"), Just("zzz")]
            .prop_map(|w| AttrValue::Keyword(w.into()));
        let num = |v: AttrValue| match v {
            AttrValue::Int(x) => Num::I(x),
            AttrValue::Float(x) => Num::F(x),
            AttrValue::Keyword(_) => unreachable!(),
        };
        let bounds = |s: BoxedStrategy<AttrValue>| {
            proptest::collection::vec(proptest::option::of(s), 4).prop_map(move |b| Bounds {
                gt: b[0].clone().map(num),
                gte: b[1].clone().map(num),
                lt: b[2].clone().map(num),
                lte: b[3].clone().map(num),
            })
        };
        prop_oneof![
            int.clone().prop_map(|v| Filter::Eq(0, v)),
            float.clone().prop_map(|v| Filter::Eq(1, v)),
            word.clone().prop_map(|v| Filter::Eq(2, v)),
            proptest::collection::vec(int.clone(), 0..6).prop_map(|v| Filter::In(0, v)),
            proptest::collection::vec(float.clone(), 0..6).prop_map(|v| Filter::In(1, v)),
            proptest::collection::vec(word, 0..4).prop_map(|v| Filter::In(2, v)),
            bounds(int.boxed()).prop_map(|b| Filter::Range(0, b)),
            bounds(float.boxed()).prop_map(|b| Filter::Range(1, b)),
        ]
    }

    fn filter() -> impl Strategy<Value = Filter> {
        leaf().prop_recursive(6, 48, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Filter::All),
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Filter::Any),
                inner.prop_map(|f| Filter::Not(Box::new(f))),
            ]
        })
    }

    proptest! {
        /// The program the device runs matches exactly the slots the CPU's compiled filter
        /// matches (its CPU twin run here step for step as the kernel runs it).
        #[test]
        fn program_matches_the_compiled_filter(f in filter(), seed in any::<u64>()) {
            let cols = columns(300, seed);
            let c = f.compile(&cols);
            let p = Program::compile(&c, &cols).expect("a depth-6 filter fits the stack");
            for slot in 0..300 {
                prop_assert_eq!(p.matches(&cols, slot), c.matches(&cols, slot), "slot {}", slot);
            }
        }
    }

    #[test]
    fn a_stack_deeper_than_a_register_is_left_to_the_cpu() {
        let mut f = Filter::Eq(0, AttrValue::Int(1));
        for _ in 0..40 {
            f = Filter::All(vec![Filter::Eq(0, AttrValue::Int(2)), f]);
        }
        let cols = columns(4, 1);
        assert!(Program::compile(&f.compile(&cols), &cols).is_none());
        // Within the filter depth limit (16) it always fits.
        let mut f = Filter::Eq(0, AttrValue::Int(1));
        for _ in 0..15 {
            f = Filter::Any(vec![Filter::Eq(0, AttrValue::Int(2)), f]);
        }
        assert!(Program::compile(&f.compile(&cols), &cols).is_some());
    }

    #[test]
    fn total_keys_order_as_total_cmp() {
        let xs = [-f64::MAX, -1.5, -0.0, 0.0, 1e-300, 2.0, f64::MAX];
        for a in xs {
            for b in xs {
                assert_eq!(total_key(a).cmp(&total_key(b)), a.total_cmp(&b), "{a} {b}");
            }
        }
    }
}
