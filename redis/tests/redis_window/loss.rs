//! Every kind of loss of a shared window is an error for every client, never "absent": a
//! generation deleted, expired early, lost and recreated, evicted; a ring entry or the
//! record lost; FLUSHALL; a restart without persistence.

use super::*;

/// The generation holding keys added now, and its Redis keys.
fn current_keys(w: &SharedWindow) -> Vec<String> {
    w.generation_keys(w.current_generation()).unwrap()
}

/// A window with keys in three generations; returns it and the keys per generation.
fn three_generations(s: &Server, name: &str, c: &ManualClock) -> (SharedWindow, Vec<Vec<Vec<u8>>>) {
    let w = SharedWindow::create(&Endpoint::url(s.url()), name, &config(4, 2_000, c)).unwrap();
    let mut per = Vec::new();
    for i in 0..3 {
        if i > 0 {
            c.advance(Duration::from_millis(W));
        }
        let k = keys(&format!("{name}{i}"), 1_000);
        w.insert_many(&k).unwrap();
        per.push(k);
    }
    (w, per)
}

#[test]
fn a_deleted_or_early_expired_generation_is_an_error_never_absent() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let c = clock();
    let (w, per) = three_generations(&s, "del", &c);
    let all: Vec<Vec<u8>> = per.concat();
    let fresh = SharedWindow::open_with_clock(&ep, "del", c.clone()).unwrap();
    // Delete the middle generation's keys (its config and shards).
    let middle = w.current_generation() - 1;
    let mut cli = s.client();
    for key in w.generation_keys(middle).unwrap() {
        redis::cmd("DEL").arg(key).exec(&mut cli).unwrap();
    }
    // The writer, a handle that never read it, and a new handle: all lost.
    all_lost(&w, &all);
    all_lost(&fresh, &all);
    let late = SharedWindow::open_with_clock(&ep, "del", c.clone()).unwrap();
    all_lost(&late, &per[0]);
    assert!(is_lost(&late.stats().unwrap_err()));
    // Adds still go to the intact current generation.
    w.insert(b"still writable").unwrap();

    // An early expiry of the current generation (only some shards): lost as well, for
    // lookups and adds, and the add's writes into emptied keys get a TTL.
    let (w2, per2) = three_generations(&s, "early", &c);
    for key in current_keys(&w2).iter().skip(1).step_by(2) {
        redis::cmd("PEXPIRE")
            .arg(key)
            .arg(1)
            .exec(&mut cli)
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(30));
    never_absent(&w2, &per2.concat());
    let err = w2.insert_many(&keys("after", 500)).unwrap_err();
    assert!(is_lost(&err), "{err}");
    for key in current_keys(&w2) {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut cli).unwrap();
        assert!(ttl != -1, "{key} has no TTL");
    }
}

#[test]
fn a_generation_lost_and_recreated_is_an_error_for_every_client() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let c = clock();
    let (w, per) = three_generations(&s, "recreate", &c);
    let mut cli = s.client();
    // The current generation vanishes (eviction of every key, say) ...
    for key in current_keys(&w) {
        redis::cmd("DEL").arg(key).exec(&mut cli).unwrap();
    }
    // ... and a client that never saw it writes: it must not start a new incarnation
    // that readers would take for the generation.
    let other = SharedWindow::open_with_clock(&ep, "recreate", c.clone()).unwrap();
    let err = other.insert(b"x").unwrap_err();
    assert!(is_lost(&err), "{err}");
    all_lost(&w, &per.concat());
    all_lost(&other, &per.concat());
    // The ring entry is written once: still the original incarnation.
    let e = w.current_generation();
    let st_before = redis_support::window_ring(&s, &w)[&e].clone();
    let late = SharedWindow::open_with_clock(&ep, "recreate", c.clone()).unwrap();
    assert!(is_lost(&late.insert(b"y").unwrap_err()));
    assert_eq!(redis_support::window_ring(&s, &w)[&e], st_before);
    // Once the lost generation ages out, the window works again.
    c.advance(Duration::from_millis(4 * W));
    assert!(w.insert(b"z").unwrap() && w.contains(b"z").unwrap());
    assert!(late.contains(b"z").unwrap());
}

#[test]
fn a_lost_ring_entry_or_record_is_an_error() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let c = clock();
    let (w, per) = three_generations(&s, "ring", &c);
    let all = per.concat();
    let mut cli = s.client();
    // A ring entry deleted behind the window's back: a handle that knew it errs.
    let oldest = w.current_generation() - 2;
    redis::cmd("HDEL")
        .arg(w.record_key())
        .arg(format!("g:{oldest}"))
        .exec(&mut cli)
        .unwrap();
    all_lost(&w, &all);
    // The whole record deleted (the generations intact): every handle errs, none opens.
    let (w2, per2) = three_generations(&s, "record", &c);
    let never_looked = SharedWindow::open_with_clock(&ep, "record", c.clone()).unwrap();
    redis::cmd("DEL")
        .arg(w2.record_key())
        .exec(&mut cli)
        .unwrap();
    all_lost(&w2, &per2.concat());
    all_lost(&never_looked, &per2.concat());
    assert!(is_lost(&w2.insert(b"k").unwrap_err()));
    assert!(is_lost(&never_looked.insert(b"k").unwrap_err()));
    assert!(matches!(
        SharedWindow::open(&ep, "record"),
        Err(Error::SharedFilterNotFound { .. })
    ));
    // Created again: a new incarnation, and the old handles still err.
    let again = SharedWindow::create(&ep, "record", &config(4, 2_000, &c)).unwrap();
    assert_ne!(again.incarnation(), w2.incarnation());
    all_lost(&w2, &per2.concat());
    assert_eq!(
        again
            .contains_many(&per2.concat())
            .unwrap()
            .iter()
            .filter(|&&b| b)
            .count(),
        0,
        "a new window does not adopt the old one's generations"
    );
}

#[test]
fn flushall_and_a_restart_without_persistence_are_errors() {
    require_redis!();
    let mut s = Server::start();
    let ep = Endpoint::url(s.url());
    let c = clock();
    let (w, per) = three_generations(&s, "flush", &c);
    // A handle that has not looked at any generation yet: only the record can tell.
    let idle = SharedWindow::open_with_clock(&ep, "flush", c.clone()).unwrap();
    redis::cmd("FLUSHALL").exec(&mut s.client()).unwrap();
    all_lost(&w, &per.concat());
    all_lost(&idle, &per.concat());
    assert!(is_lost(&idle.insert(b"k").unwrap_err()));
    // Nothing was recreated by those adds: the server is still empty.
    let n: i64 = redis::cmd("DBSIZE").query(&mut s.client()).unwrap();
    assert_eq!(n, 0, "a lost window's add created keys");

    let (w2, per2) = three_generations(&s, "restart", &c);
    let idle2 = SharedWindow::open_with_clock(&ep, "restart", c.clone()).unwrap();
    s.restart(); // kill -9, start empty
    all_lost(&w2, &per2.concat());
    all_lost(&idle2, &per2.concat());
    assert!(matches!(
        SharedWindow::open(&ep, "restart"),
        Err(Error::SharedFilterNotFound { .. })
    ));
}

#[test]
fn evicted_generations_are_errors_never_absent() {
    require_redis!();
    let s = Server::start_evicting();
    let c = clock();
    let (w, per) = three_generations(&s, "evict", &c);
    let mut cli = s.client();
    let junk = vec![7u8; 64 << 10];
    for i in 0..2_000 {
        let _ = redis::cmd("SET")
            .arg(format!("junk:{i}"))
            .arg(&junk)
            .exec(&mut cli);
    }
    let mut window_keys = vec![w.record_key()];
    let cur = w.current_generation();
    for e in cur - 2..=cur {
        window_keys.extend(w.generation_keys(e).unwrap());
    }
    let gone = window_keys
        .iter()
        .filter(|k| redis::cmd("EXISTS").arg(k).query::<i64>(&mut cli).unwrap() == 0)
        .count();
    assert!(gone > 0, "nothing of the window was evicted");
    never_absent(&w, &per.concat());
}
