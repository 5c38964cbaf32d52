//! The table of one size: the filters' rows against fastbloom, the store's rows against
//! sled and the absent-`get` bound, the inserts, and the notes under the table.

use bloomsled::window::Window;

use crate::common::rounds::{fmt_ns, median, median_ratio};
use crate::common::size_label;
use crate::contenders::{Measured, Pairs};
use crate::setup::{Passed, Queries, Setup};
use crate::{bound_cell, cell, count, Row, GENERATIONS, Q, Q_SLED};

/// The query streams, one column each.
const TAGS: [&str; 3] = ["absent", "present", "mixed"];

/// The table of one size, in Markdown, with its heading and the notes under it.
pub fn render(
    s: &Setup,
    q: &Queries,
    p: &Passed<'_>,
    m: &Measured,
    pairs: Option<&Pairs>,
    ins: &[Vec<f64>],
    rounds: usize,
) -> String {
    let mut rows = filter_rows(s, q, m);
    let mut extra = String::new();
    if let Some((db, _)) = &s.stores {
        rows.extend(get_rows(m));
        rows.extend(rejected_rows(m));
        let store = StoreRows::new(m, p);
        rows.extend(store.bound_rows(&mut extra, s, p, pairs.unwrap()));
        #[cfg(feature = "metrics")]
        rows.extend(metrics_rows(m));
        rows.push(Row {
            what: "`insert` of a fresh key: sled / **bloomsled `Tree::insert`**".into(),
            cells: vec![
                cell(&ins[5], None),
                cell(&ins[4], Some(&ins[5])),
                String::new(),
            ],
        });
        let st = db.stats();
        extra += &format!(
            "- Store: {} keys, {:.2} bits/key, k = {}.\n",
            st.items, st.bits_per_key, st.num_hashes
        );
        extra += &store.bits_per_key_table(db, s, q);
    }
    rows.extend(insert_rows(ins));
    let mut table = format!(
        "#### {} keys in the filter, 10 bits/key, {} absent, {} present and {} mixed query keys\n\n\
         bloomsled's probe kernel: {} (`BLOOMSLED_KERNEL`). Medians of {rounds} interleaved rounds; in brackets the median per-round ratio to \
         the baseline of its section and its min–max. False-positive rate: bloomsled \
         {:.3}%, fastbloom {:.3}%, bloomfilter {:.3}%.\n\n\
         | per key | absent keys | present keys | 50/50 mix |\n|---|---:|---:|---:|\n",
        size_label(s.n),
        Q,
        Q,
        Q,
        bloomsled::probe_kernel(),
        100.0 * s.fpr_bs,
        100.0 * s.fpr_fb,
        100.0 * s.fpr_bf
    );
    for r in rows {
        table += &format!("| {} | {} |\n", r.what, r.cells.join(" | "));
    }
    table += &format!("\n{extra}\n");
    table
}

/// The filters' rows: fastbloom (the baseline), `Filter::contains`, `Tree::may_contain`,
/// `Window::may_contain`, bloomfilter, and the two by hash.
fn filter_rows(s: &Setup, q: &Queries, m: &Measured) -> Vec<Row> {
    let fb_of = |tag: &str| m.get(&format!("fastbloom/{tag}"));
    // One cell per column, each against fastbloom's figure of that column.
    let vs_fastbloom = |name: &str| -> Vec<String> {
        TAGS.iter()
            .map(|t| match m.get(&format!("{name}/{t}")) {
                Some(v) => cell(v, fb_of(t)),
                None => String::new(),
            })
            .collect()
    };
    let mut rows = vec![
        Row {
            what: "fastbloom 0.17 + xxh3-64 (`contains_hash`), baseline".into(),
            cells: TAGS.iter().map(|t| cell(fb_of(t).unwrap(), None)).collect(),
        },
        Row {
            what: "**bloomsled `Filter::contains`**".into(),
            cells: vs_fastbloom("filter"),
        },
    ];
    if s.tree().is_some() {
        rows.push(Row {
            what: match s.sized {
                None => "**bloomsled `Tree::may_contain`**".into(),
                Some(_) => format!(
                    "**bloomsled `Tree::may_contain`**: a tree whose filter is sized for {} keys \
                     (the same bytes), holding the present query keys",
                    size_label(s.n)
                ),
            },
            cells: vs_fastbloom("may_contain"),
        });
    }
    if let Some((_, w)) = &s.window {
        rows.push(window_row(s.n, w, q, m));
    }
    rows.push(Row {
        what: "`bloomfilter` 3 (SipHash, its own k)".into(),
        cells: vs_fastbloom("bloomfilter"),
    });
    let fbh = |t: &str| m.get(&format!("fastbloom_hash/{t}"));
    rows.push(Row {
        what: "by hash (hashes made beforehand): fastbloom `contains_hash`".into(),
        cells: TAGS.iter().map(|t| cell(fbh(t).unwrap(), None)).collect(),
    });
    rows.push(Row {
        what: "by hash: bloomsled `Filter::contains_hash`".into(),
        cells: TAGS
            .iter()
            .map(|t| cell(m.get(&format!("filter_hash/{t}")).unwrap(), fbh(t)))
            .collect(),
    });
    rows
}

/// `Window::may_contain`'s row, against `Tree::may_contain` in the same rounds (after
/// checking the window has no false negative).
fn window_row(n: u64, w: &Window, q: &Queries, m: &Measured) -> Row {
    assert_eq!(
        count(&q.present, |k| w.may_contain(k)),
        Q as u64,
        "false negative"
    );
    let fpr_window = count(&q.absent, |k| w.may_contain(k)) as f64 / Q as f64;
    Row {
        what: format!(
            "**bloomsled `Window::may_contain`**: {GENERATIONS} generations of {} keys \
             (10 bits/key each, FPR {:.3}%), the same keys (ratio: to `Tree::may_contain` \
             in the same rounds)",
            size_label(n / u64::from(GENERATIONS)),
            100.0 * fpr_window
        ),
        cells: TAGS
            .iter()
            .map(|t| {
                cell(
                    m.get(&format!("window/{t}")).unwrap(),
                    m.get(&format!("may_contain/{t}")),
                )
            })
            .collect(),
    }
}

/// The store's `get` rows: sled's `get` on bloomsled's store, and `Tree::get` against it
/// and against plain sled.
fn get_rows(m: &Measured) -> Vec<Row> {
    let get = |name: &str| m.get(name);
    let sled_abs = get("sled_get/absent").unwrap();
    let sled_pre = get("sled_get/present").unwrap();
    let own_abs = get("unfiltered/absent").unwrap();
    let own_pre = get("unfiltered/present").unwrap();
    let (get_abs, get_pre) = (get("get/absent").unwrap(), get("get/present").unwrap());
    let vs_sled = |sled: &[f64], ours: &[f64]| {
        format!(
            "{} ({:.2}×)",
            fmt_ns(median(sled.to_vec())),
            median_ratio(sled, ours)
        )
    };
    let mut rows = vec![
        Row {
            what: "sled's `get` on bloomsled's store (`Tree::get_unfiltered`)".into(),
            cells: vec![cell(own_abs, None), cell(own_pre, None), String::new()],
        },
        Row {
            what: "**bloomsled `Tree::get`** (ratio: to sled's `get` on the same store)".into(),
            cells: vec![
                cell(get_abs, Some(own_abs)),
                cell(get_pre, Some(own_pre)),
                String::new(),
            ],
        },
        Row {
            what: "plain sled 0.34 `get`, a second store of the same keys (ratio: \
                   bloomsled `Tree::get` to it)"
                .into(),
            cells: vec![
                vs_sled(sled_abs, get_abs),
                vs_sled(sled_pre, get_pre),
                String::new(),
            ],
        },
    ];
    if let (Some(off_abs), Some(off_pre)) =
        (get("get_nomemory/absent"), get("get_nomemory/present"))
    {
        rows.push(Row {
            what: "`Tree::get` with the false-positive memory off, a second store of the same \
                   keys (ratio: `Tree::get` with it on, the default, to it; the stream \
                   repeats every round, so its false positives are remembered after the first)"
                .into(),
            cells: vec![
                vs_sled(off_abs, get_abs),
                vs_sled(off_pre, get_pre),
                String::new(),
            ],
        });
    }
    rows
}

/// `Tree::get` on the absent keys the filter rejects, against `may_contain` on them:
/// unwrapped, and matched in place.
fn rejected_rows(m: &Measured) -> Vec<Row> {
    let get = |name: &str| m.get(name);
    vec![
        Row {
            what: "bloomsled `Tree::get`, absent keys the filter rejects, `.unwrap().is_some()` \
                   (ratio: to `may_contain` on the same keys)"
                .into(),
            cells: vec![
                cell(get("get/rejected").unwrap(), get("may_contain/rejected")),
                String::new(),
                String::new(),
            ],
        },
        Row {
            what: "the same, the answer matched in place: `matches!(get(k), Ok(Some(_)))` \
                   (ratio: to `may_contain` on the same keys)"
                .into(),
            cells: vec![
                cell(
                    get("get_matched/rejected").unwrap(),
                    get("may_contain/rejected"),
                ),
                String::new(),
                String::new(),
            ],
        },
    ]
}

/// The absent-get bound: filter path + FPR × sled's absent get, per round: `path` + `fpr`
/// × `sled`, round by round.
fn formula(path: &[f64], fpr: f64, sled: &[f64]) -> Vec<f64> {
    path.iter().zip(sled).map(|(m, s)| m + fpr * s).collect()
}

/// The figures the store's bound rows share.
struct StoreRows<'m> {
    m: &'m Measured,
    /// sled's absent `get` on bloomsled's store, in a tight loop.
    own_abs: &'m [f64],
    /// bloomsled's absent `get`.
    get_abs: &'m [f64],
    /// `may_contain` on the absent keys.
    may_contain: &'m [f64],
    /// The store's filter's false-positive rate on the absent keys.
    store_fpr: f64,
    /// `may_contain` + FPR × sled's absent `get` in a tight loop, round by round.
    bound: Vec<f64>,
}

impl<'m> StoreRows<'m> {
    fn new(m: &'m Measured, p: &Passed<'_>) -> Self {
        let own_abs = m.get("unfiltered/absent").unwrap();
        let may_contain = m.get("may_contain/absent").unwrap();
        let store_fpr = 1.0 - p.negatives.len() as f64 / Q as f64;
        StoreRows {
            m,
            own_abs,
            get_abs: m.get("get/absent").unwrap(),
            may_contain,
            store_fpr,
            bound: formula(may_contain, store_fpr, own_abs),
        }
    }

    /// The absent-`get` bound three ways and the compositions against it, the paired
    /// `Tree::get`, and fastbloom's composition; the false positives' lookups go to `extra`.
    fn bound_rows(&self, extra: &mut String, s: &Setup, p: &Passed<'_>, pairs: &Pairs) -> Vec<Row> {
        let (m, get_abs) = (self.m, self.get_abs);
        let mut rows = vec![Row {
            what: format!(
                "bound: `may_contain` + FPR ({:.3}%) × sled's absent `get` in a tight loop \
                 (ratio: `get` to it)",
                100.0 * self.store_fpr
            ),
            cells: vec![
                bound_cell(&self.bound, get_abs),
                String::new(),
                String::new(),
            ],
        }];
        let fp_hashed = self.false_positive_notes(extra, p);
        let stream_bound = formula(self.may_contain, self.store_fpr, &fp_hashed);
        rows.push(Row {
            what: "bound with sled's `get` as it costs in the stream: `may_contain` + FPR × \
                   sled's `get` of the passed keys after hashing the keys between them, no \
                   filter probed (ratio: `get` to it)"
                .into(),
            cells: vec![
                bound_cell(&stream_bound, get_abs),
                String::new(),
                String::new(),
            ],
        });
        let ((pg, ps), (ag, ac)) = pairs;
        rows.push(Row {
            what: "bound measured: `may_contain`, then sled's `get` for the keys it passes; \
                   paired with `get` in alternating chunks of 4,096 keys (ratio: `get` to it)"
                .into(),
            cells: vec![bound_cell(ac, ag), String::new(), String::new()],
        });
        rows.push(Row {
            what: "**bloomsled `Tree::get`** paired with sled's `get` on the same store, \
                   alternating chunks of 256 keys (ratio: to sled's)"
                .into(),
            cells: vec![String::new(), cell(pg, Some(ps)), String::new()],
        });
        // The composition itself against the formula: what a `get` that added nothing to
        // `may_contain` and sled's `get` would read, so how much of the bound is left for it.
        rows.push(Row {
            what: format!(
                "bloomsled `may_contain`, then sled's `get` for the keys it passes (ratio: to \
                 `may_contain` + FPR ({:.3}%) × sled's absent `get` in a tight loop)",
                100.0 * self.store_fpr
            ),
            cells: vec![
                cell(m.get("composed/absent").unwrap(), Some(&self.bound)),
                String::new(),
                String::new(),
            ],
        });
        rows.push(self.fastbloom_composed_row(s));
        rows
    }

    /// fastbloom's own bound by the same formula, and its measured composition against it.
    fn fastbloom_composed_row(&self, s: &Setup) -> Row {
        let fb_abs = self.m.get("fastbloom/absent").unwrap();
        let fb_bound = formula(fb_abs, s.fpr_fb, self.own_abs);
        Row {
            what: format!(
                "for comparison: fastbloom + xxh3, then sled's `get` for the keys it passes \
                 (ratio: to fastbloom + FPR ({:.3}%) × sled's absent `get` in a tight loop)",
                100.0 * s.fpr_fb
            ),
            cells: vec![
                cell(
                    self.m.get("fastbloom_composed/absent").unwrap(),
                    Some(&fb_bound),
                ),
                String::new(),
                String::new(),
            ],
        }
    }

    /// The notes on the false positives' sled lookups (back to back, spread through the
    /// stream, after bloomsled's probes; as many other absent keys back to back); returns
    /// their cost in the stream per false positive, round by round.
    fn false_positive_notes(&self, extra: &mut String, p: &Passed<'_>) -> Vec<f64> {
        let (m, fps) = (self.m, &p.fps);
        // The false positives' sled lookups, per false positive, round by round.
        let per_fp = |with: &[f64], without: &[f64]| -> Vec<f64> {
            let scale = Q as f64 / fps.len() as f64;
            with.iter()
                .zip(without)
                .map(|(w, o)| (w - o) * scale)
                .collect()
        };
        let fp_hashed = per_fp(m.get("fp/hashed").unwrap(), m.get("hash/absent").unwrap());
        let fp_probed = per_fp(m.get("composed/absent").unwrap(), self.may_contain);
        let fp_tight = m.get("fp/tight").unwrap();
        *extra += &format!(
            "- sled's `get` of the {} absent keys the filter passes: {} back to back; spread \
             through the stream as they come, after hashing the keys between them with no filter \
             probed, {} ({:.2}× back to back); after bloomsled's probes of those keys, {} \
             ({:.2}×).\n",
            fps.len(),
            fmt_ns(median(fp_tight.to_vec())),
            fmt_ns(median(fp_hashed.clone())),
            median_ratio(fp_tight, &fp_hashed),
            fmt_ns(median(fp_probed.clone())),
            median_ratio(fp_tight, &fp_probed),
        );
        *extra += &format!(
            "- sled's `get` of as many other absent keys, back to back: the first {} (contiguous \
             in memory, like the tight loop's {}) {}; one in {} (spread through memory like the \
             passed keys) {}.\n",
            fps.len(),
            Q_SLED,
            fmt_ns(median(m.get("fp/first").unwrap().to_vec())),
            p.spread_step,
            fmt_ns(median(m.get("fp/spread").unwrap().to_vec())),
        );
        fp_hashed
    }

    /// What more bits per key buy, every store in the same rounds: a line per store.
    fn bits_per_key_table(&self, db: &bloomsled::Db, s: &Setup, q: &Queries) -> String {
        let mut out = "\n| bits/key | k | filter | FPR | `may_contain` | absent `get` | bound: \
                       `may_contain` + FPR × sled's absent `get` in a tight loop (`get` ÷ it) | \
                       absent `get`: speed-up over sled's |\n\
                       |---:|---:|---:|---:|---:|---:|---:|---:|\n"
            .to_string();
        out += &self.bits_per_key_line(db, self.may_contain, self.get_abs, self.store_fpr, false);
        for (b, d) in &s.denser {
            let fpr = count(&q.absent, |k| d.may_contain(k)) as f64 / Q as f64;
            let mc = self.m.get(&format!("may_contain@{b}/absent")).unwrap();
            let g = self.m.get(&format!("get@{b}/absent")).unwrap();
            out += &self.bits_per_key_line(d, mc, g, fpr, *b == 0);
        }
        out
    }

    /// One store's line of [`Self::bits_per_key_table`].
    fn bits_per_key_line(
        &self,
        d: &bloomsled::Db,
        mc: &[f64],
        g: &[f64],
        fpr: f64,
        default: bool,
    ) -> String {
        let s = d.stats();
        let bound = formula(mc, fpr, self.own_abs);
        format!(
            "| {:.1}{} | {} | {:.1} MB | {:.3}% | {} | {} | {} | {:.0}× |\n",
            s.bits_per_key,
            if default { " (default)" } else { "" },
            s.num_hashes,
            s.num_bits as f64 / 8e6,
            100.0 * fpr,
            fmt_ns(median(mc.to_vec())),
            fmt_ns(median(g.to_vec())),
            bound_cell(&bound, g),
            median_ratio(g, self.own_abs),
        )
    }
}

/// The filters' insert rows: fastbloom's two filters against bloomsled's, and bloomfilter.
fn insert_rows(ins: &[Vec<f64>]) -> Vec<Row> {
    vec![
        Row {
            what: "`insert` of a fresh key: fastbloom `BloomFilter` (`&mut self`) / **bloomsled \
                   `Filter::insert`**"
                .into(),
            cells: vec![
                cell(&ins[0], None),
                cell(&ins[2], Some(&ins[0])),
                String::new(),
            ],
        },
        Row {
            what: "`insert` of a fresh key: fastbloom `AtomicBloomFilter` (`&self`, like ours) / \
                   **bloomsled `Filter::insert`**"
                .into(),
            cells: vec![
                cell(&ins[1], None),
                cell(&ins[2], Some(&ins[1])),
                String::new(),
            ],
        },
        Row {
            what: "`insert`: `bloomfilter` `check_and_set` (ratio: to fastbloom `BloomFilter`)"
                .into(),
            cells: vec![cell(&ins[3], Some(&ins[0])), String::new(), String::new()],
        },
    ]
}

/// With `--features metrics`: `Tree::may_contain` and an absent `Tree::get` while the
/// store's series are recorded, each against the same call without, in the same rounds.
#[cfg(feature = "metrics")]
fn metrics_rows(m: &Measured) -> Vec<Row> {
    vec![
        Row {
            what: "with `metrics` on: **`Tree::may_contain`** while a recorder is installed \
                   and the store's series are recorded every 10 ms (ratio: to \
                   `Tree::may_contain` without, same rounds)"
                .into(),
            cells: vec![
                cell(
                    m.get("may_contain_metrics/absent").unwrap(),
                    m.get("may_contain/absent"),
                ),
                cell(
                    m.get("may_contain_metrics/present").unwrap(),
                    m.get("may_contain/present"),
                ),
                String::new(),
            ],
        },
        Row {
            what: "with `metrics` on: **`Tree::get`** of absent keys, the same recording \
                   (ratio: to `Tree::get` without, same rounds)"
                .into(),
            cells: vec![
                cell(m.get("get_metrics/absent").unwrap(), m.get("get/absent")),
                String::new(),
                String::new(),
            ],
        },
    ]
}
