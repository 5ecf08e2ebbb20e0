//! The check of an untyped payload against its event's declared fields: each value put is
//! held to the next declared field's kind, struct members flattened in order.

use std::fmt;

use crate::provider::{FieldKind, FieldSpec};

/// Where a payload stands against its declared layout: the fields still to be put, and the
/// first break, if any.
pub(crate) struct Check {
    expected: Expected,
    mismatch: Option<Mismatch>,
}

impl Check {
    #[inline]
    pub(crate) fn new(fields: &'static [FieldSpec]) -> Check {
        Check {
            expected: Expected::new(fields),
            mismatch: None,
        }
    }

    /// The first break so far.
    pub(crate) fn mismatch(&self) -> Option<Mismatch> {
        self.mismatch
    }

    /// Whether the next declared field is of `kind`; records the mismatch if not. Inlined
    /// into every `put`: a top-level field of the kind put is an index, one compare and two
    /// increments; anything else (a struct member, a mismatch, past the end) takes
    /// [`expect_slow`](Self::expect_slow). After a mismatch the fast path may go on putting
    /// bytes: they are discarded with the event, which [`finish`](Self::finish) refuses.
    #[inline(always)]
    pub(crate) fn expect(&mut self, kind: FieldKind) -> bool {
        let expected = &mut self.expected;
        if expected.member == 0 {
            if let Some(field) = expected.top.get(expected.at) {
                // `kind` is never `Struct`, so a struct field always takes the slow path.
                if std::mem::discriminant(&field.kind) == std::mem::discriminant(&kind) {
                    expected.at += 1;
                    expected.index += 1;
                    return true;
                }
            }
        }
        self.expect_slow(kind)
    }

    #[inline(never)]
    fn expect_slow(&mut self, kind: FieldKind) -> bool {
        if self.mismatch.is_some() {
            return false;
        }
        let index = self.expected.index;
        match self.expected.next() {
            Ok(Some(declared))
                if std::mem::discriminant(&declared) == std::mem::discriminant(&kind) =>
            {
                true
            }
            Ok(Some(declared)) => {
                self.mismatch = Some(Mismatch::Kind {
                    index,
                    declared,
                    put: kind,
                });
                false
            }
            Ok(None) => {
                self.mismatch = Some(Mismatch::TooMany { declared: index });
                false
            }
            Err(too_deep) => {
                self.mismatch = Some(too_deep);
                false
            }
        }
    }

    /// Whether every declared field was put, and each as its declared kind.
    #[inline]
    pub(crate) fn finish(mut self) -> Result<(), Mismatch> {
        if let Some(mismatch) = self.mismatch {
            return Err(mismatch);
        }
        if self.expected.member == 0 && self.expected.at == self.expected.top.len() {
            return Ok(());
        }
        let index = self.expected.index;
        match self.expected.next()? {
            None => Ok(()),
            Some(_) => Err(Mismatch::Missing { index }),
        }
    }
}

/// How a payload broke its declared layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mismatch {
    /// Field `index` (counting struct members) is declared `declared` but was put as `put`.
    Kind {
        index: usize,
        declared: FieldKind,
        put: FieldKind,
    },
    /// A value was put after the last declared field.
    TooMany { declared: usize },
    /// The fill returned with field `index` onwards not put.
    Missing { index: usize },
    /// Structs nest deeper than the writer follows.
    TooDeep,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Kind {
                index,
                declared,
                put,
            } => write!(
                f,
                "field {index} is declared {declared:?} but was put as {put:?}"
            ),
            Mismatch::TooMany { declared } => {
                write!(f, "a value was put after the {declared} declared fields")
            }
            Mismatch::Missing { index } => write!(f, "fields from {index} on were not put"),
            Mismatch::TooDeep => write!(f, "structs nest more than {MAX_DEPTH} deep"),
        }
    }
}

/// How deep structs may nest in a checked payload (the runtime's own counters nest two).
const MAX_DEPTH: usize = 4;

/// The declared fields still to be put, struct members flattened in order. Small, and
/// without a stack: most events declare no struct, and their check is an index and one byte
/// compared per field; a struct's next member is found by walking it again (a few fields,
/// in events written about once a second).
struct Expected {
    /// The event's declared fields, and the next position in them.
    top: &'static [FieldSpec],
    at: usize,
    /// Inside the struct at `at`: how many of its (flattened) members were taken.
    member: usize,
    /// How many fields have been taken, counting struct members.
    index: usize,
}

/// The `n`th leaf of `fields`, structs flattened; or how many leaves there are, when fewer.
fn nth_leaf(
    fields: &[FieldSpec],
    mut n: usize,
    depth: usize,
) -> Result<Result<FieldKind, usize>, Mismatch> {
    let mut counted = 0;
    for field in fields {
        match field.kind {
            FieldKind::Struct(members) => {
                if depth + 1 >= MAX_DEPTH {
                    return Err(Mismatch::TooDeep);
                }
                match nth_leaf(members, n, depth + 1)? {
                    Ok(kind) => return Ok(Ok(kind)),
                    Err(leaves) => {
                        n -= leaves;
                        counted += leaves;
                    }
                }
            }
            kind if n == 0 => return Ok(Ok(kind)),
            _ => {
                n -= 1;
                counted += 1;
            }
        }
    }
    Ok(Err(counted))
}

impl Expected {
    #[inline]
    fn new(fields: &'static [FieldSpec]) -> Expected {
        Expected {
            top: fields,
            at: 0,
            member: 0,
            index: 0,
        }
    }

    /// The next declared field's kind, entering structs; `None` past the last.
    #[inline]
    fn next(&mut self) -> Result<Option<FieldKind>, Mismatch> {
        loop {
            let Some(field) = self.top.get(self.at) else {
                return Ok(None);
            };
            let FieldKind::Struct(members) = field.kind else {
                self.at += 1;
                self.index += 1;
                return Ok(Some(field.kind));
            };
            match nth_leaf(members, self.member, 1)? {
                Ok(kind) => {
                    self.member += 1;
                    self.index += 1;
                    return Ok(Some(kind));
                }
                Err(_) => {
                    self.at += 1;
                    self.member = 0;
                }
            }
        }
    }
}
