//! The fence conditions of idem's store, stated once.
//!
//! A fenced write applies only while the record it finds satisfies every
//! [`Condition`] of its row in [`FENCES`], judged in one atomic step on the **store's**
//! clock. This table is the one statement of those conditions:
//! - each backend builds its guards from it, one fragment per condition (Redis:
//!   `store/redis/scripts.rs` `guard`, PostgreSQL: `store/postgres/sql.rs` `guard`,
//!   memory: `store/memory/fence.rs` `holds`), each an exhaustive `match`, so a new
//!   condition does not compile until every backend says how it checks it;
//! - the model's store (`idem-model`) evaluates it with [`refusal`], and the
//!   model-based test (`tests/stores/store_model`) checks every backend's answers
//!   against the model's, naming the row and condition that decided;
//! - `docs/reliability.md` carries [`markdown`]'s table, checked by a test here.
//!
//! A reservation is not in the table: it writes only where no live record is stored
//! (each store's own insert-if-absent: `SET NX`, `INSERT … ON CONFLICT`, a map entry).

use std::fmt::Write as _;

/// The store's fenced writes (idem's `Store` API).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Write {
    /// `replace_if_owner`: the owner stores its outcome, or ends its own lease.
    ReplaceIfOwner,
    /// `take_over`: a duplicate takes over an unknown outcome to forward it again, or
    /// a reconcile or an operator settles it.
    TakeOver,
    /// `renew`: the owner extends its lease while its call runs.
    Renew,
    /// `release_if_owner`: the owner deletes its attempt, nothing having been sent.
    ReleaseIfOwner,
}

/// What a fenced write's guard reads of the stored record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Condition {
    /// A live record (within its retention) carries the token the writer holds (or,
    /// for a takeover, the token it read).
    Owner,
    /// The record is an attempt in progress, not a completed one.
    InProgress,
    /// The attempt's lease has ended by the store's clock.
    LeaseEnded,
    /// The attempt's lease has not ended by the store's clock.
    LeaseLive,
    /// With a key window (`on_unknown: retry` under `upstream_key_window`), the
    /// attempt's first send is younger than it by the store's clock; always holds
    /// without one.
    WithinKeyWindow,
}

/// One row: a write and the conditions it applies under, in the order they are checked.
#[derive(Clone, Copy, Debug)]
pub struct Fence {
    pub write: Write,
    pub requires: &'static [Condition],
}

/// The table.
pub const FENCES: [Fence; 4] = [
    Fence {
        write: Write::ReplaceIfOwner,
        requires: &[Condition::Owner],
    },
    Fence {
        write: Write::TakeOver,
        requires: &[
            Condition::Owner,
            Condition::InProgress,
            Condition::LeaseEnded,
            Condition::WithinKeyWindow,
        ],
    },
    Fence {
        write: Write::Renew,
        requires: &[
            Condition::Owner,
            Condition::InProgress,
            Condition::LeaseLive,
        ],
    },
    Fence {
        write: Write::ReleaseIfOwner,
        requires: &[Condition::Owner],
    },
];

impl Write {
    /// Every fenced write, in the table's order.
    pub const ALL: [Write; 4] = [
        Write::ReplaceIfOwner,
        Write::TakeOver,
        Write::Renew,
        Write::ReleaseIfOwner,
    ];

    /// The conditions this write applies under, in the order they are checked.
    pub fn requires(self) -> &'static [Condition] {
        FENCES
            .iter()
            .find(|f| f.write == self)
            .map_or(&[], |f| f.requires)
    }

    /// The `Store` method.
    pub fn name(self) -> &'static str {
        match self {
            Write::ReplaceIfOwner => "replace_if_owner",
            Write::TakeOver => "take_over",
            Write::Renew => "renew",
            Write::ReleaseIfOwner => "release_if_owner",
        }
    }

    /// What idem uses it for.
    pub fn used_for(self) -> &'static str {
        match self {
            Write::ReplaceIfOwner => "the owner stores its outcome, or ends its own lease",
            Write::TakeOver => {
                "a duplicate takes over an unknown outcome; a reconcile or an operator settles one"
            }
            Write::Renew => "the owner extends its lease while its call runs",
            Write::ReleaseIfOwner => "the owner deletes its attempt, nothing having been sent",
        }
    }
}

impl Condition {
    /// Every condition, in the table's column order.
    pub const ALL: [Condition; 5] = [
        Condition::Owner,
        Condition::InProgress,
        Condition::LeaseEnded,
        Condition::LeaseLive,
        Condition::WithinKeyWindow,
    ];

    /// The condition in a few words (the table's column heading).
    pub fn name(self) -> &'static str {
        match self {
            Condition::Owner => "token matches",
            Condition::InProgress => "in progress",
            Condition::LeaseEnded => "lease ended",
            Condition::LeaseLive => "lease live",
            Condition::WithinKeyWindow => "within key window",
        }
    }

    /// Whether checking it reads the store's clock.
    pub fn reads_clock(self) -> bool {
        matches!(
            self,
            Condition::LeaseEnded | Condition::LeaseLive | Condition::WithinKeyWindow
        )
    }

    /// Whether the condition holds for what the store found.
    pub fn holds(self, found: &Found) -> bool {
        match self {
            Condition::Owner => found.owner,
            Condition::InProgress => found.in_progress,
            Condition::LeaseEnded => found.lease_ended,
            Condition::LeaseLive => !found.lease_ended,
            Condition::WithinKeyWindow => found.within_key_window,
        }
    }
}

/// What the store found when it judged a write, each on its own clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// A live record carries the writer's token.
    pub owner: bool,
    /// The record is an attempt in progress.
    pub in_progress: bool,
    /// It is an attempt whose lease has ended.
    pub lease_ended: bool,
    /// No key window was given, or the attempt's first send is younger than it.
    pub within_key_window: bool,
}

/// The first condition of `write`'s row that `found` fails, or `None`: the write applies.
pub fn refusal(write: Write, found: &Found) -> Option<Condition> {
    write.requires().iter().copied().find(|c| !c.holds(found))
}

/// The table as Markdown, for `docs/reliability.md` (checked by this crate's test).
pub fn markdown() -> String {
    let mut out = String::from("| write | used for |");
    for c in Condition::ALL {
        let _ = write!(out, " {} |", c.name());
    }
    out.push_str("\n|---|---|");
    out.push_str(&":---:|".repeat(Condition::ALL.len()));
    for w in Write::ALL {
        let _ = write!(out, "\n| `{}` | {} |", w.name(), w.used_for());
        for c in Condition::ALL {
            out.push_str(if w.requires().contains(&c) {
                " ✔ |"
            } else {
                " |"
            });
        }
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/reliability.md holds the table as [`markdown`] renders it: the docs cannot
    /// drift from what the stores and the model check.
    #[test]
    fn the_docs_hold_this_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/reliability.md");
        let docs = std::fs::read_to_string(path).expect("docs/reliability.md");
        let table = markdown();
        assert!(
            docs.contains(&table),
            "docs/reliability.md, \"The fence conditions\", must hold this table:\n{table}"
        );
    }

    #[test]
    fn every_write_has_one_row_and_every_condition_is_used() {
        for w in Write::ALL {
            assert_eq!(FENCES.iter().filter(|f| f.write == w).count(), 1, "{w:?}");
        }
        for c in Condition::ALL {
            assert!(
                FENCES.iter().any(|f| f.requires.contains(&c)),
                "{c:?} unused"
            );
        }
    }

    #[test]
    fn a_write_is_refused_by_its_first_failing_condition() {
        let all = Found {
            owner: true,
            in_progress: true,
            lease_ended: true,
            within_key_window: true,
        };
        assert_eq!(refusal(Write::TakeOver, &all), None);
        assert_eq!(refusal(Write::Renew, &all), Some(Condition::LeaseLive));
        let stranger = Found {
            owner: false,
            ..all
        };
        for w in Write::ALL {
            assert_eq!(refusal(w, &stranger), Some(Condition::Owner), "{w:?}");
        }
        let late = Found {
            within_key_window: false,
            ..all
        };
        assert_eq!(
            refusal(Write::TakeOver, &late),
            Some(Condition::WithinKeyWindow)
        );
        assert_eq!(refusal(Write::ReplaceIfOwner, &late), None);
    }
}
