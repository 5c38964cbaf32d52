"""Round trips and errors of the Python API."""

from __future__ import annotations

import pytest

import bloomsled


def test_db_round_trip_bytes_and_str(tmp_path):
    with bloomsled.Db(str(tmp_path / "db"), expected_items=10_000) as db:
        assert isinstance(db, bloomsled.Tree)
        assert db.insert(b"k", b"v1") is None
        assert db.insert("k", "v2") == b"v1"  # str is its UTF-8
        assert db.get("k") == b"v2"
        assert db.get(b"absent") is None
        assert "k" in db and b"k" in db and "absent" not in db
        assert db.may_contain("k")
        assert db.insert("é", "ü") is None and db.get("é".encode()) == "ü".encode()
        assert len(db) == 2 and bool(db)
        assert sorted(db) == sorted([b"k", "é".encode()])
        assert db.remove("k") == b"v2" and db.remove("k") is None
        assert "k" not in db
        assert db.insert_if_absent("x") and not db.insert_if_absent("x", b"other")
        assert db.get("x") == b""
        db.insert_many([(b"a", b"1"), ("b", "2")])
        assert db.contains_many([b"a", "b", "zz", b"x"]) == [True, True, False, True]
        assert list(db.items())[:2] == [(b"a", b"1"), (b"b", b"2")]
        assert db.flush() >= 0
        s = db.stats()
        assert s["items"] >= 4 and s["capacity"] == 10_000 and s["mode"] == "plain"
        assert db.recovery_report()["outcome"] in ("created", "loaded")


def test_trees_and_reopen(tmp_path):
    path = str(tmp_path / "db")
    db = bloomsled.Db(path)
    t = db.open_tree("urls", expected_items=1_000)
    assert isinstance(t, bloomsled.Tree) and t.name == b"urls"
    for i in range(2_000):  # past the tree's capacity, across chunks of the iterator
        t.insert(f"https://example.com/{i:05}", b"")
    keys = list(t)
    assert len(keys) == 2_000 and keys == sorted(keys)
    assert b"urls" in db.tree_names()
    db.close()
    assert db.closed
    with bloomsled.Db(path) as db2:
        t2 = db2.open_tree("urls")
        assert len(t2) == 2_000 and "https://example.com/01999" in t2
        report = t2.recovery_report()
        assert report["outcome"] == "loaded" and report["keys_scanned"] == 0, report
        assert all(r["outcome"] == "loaded" for r in db2.recovery_reports())


def test_closed_db_raises_not_crashes(tmp_path):
    db = bloomsled.Db(str(tmp_path / "db"))
    t = db.open_tree("t")
    db.insert("a", "b")
    it = iter(db)
    db.close()
    db.close()  # twice is fine
    for call in (
        lambda: db.get("a"),
        lambda: db.insert("a", "b"),
        lambda: "a" in db,
        lambda: len(db),
        lambda: t.get("a"),
        lambda: t.contains_many(["a"]),
        lambda: db.open_tree("u"),
        lambda: db.tree_names(),
        lambda: next(it),
        lambda: db.stats(),
    ):
        with pytest.raises(bloomsled.ClosedError):
            call()
    assert issubclass(bloomsled.ClosedError, bloomsled.Error)
    assert issubclass(bloomsled.PoisonedError, bloomsled.Error)
    # The files were released: the same path opens again in this process.
    with bloomsled.Db(str(tmp_path / "db")) as again:
        assert again.get("a") == b"b"


def test_bad_input_is_a_typed_error(tmp_path):
    with pytest.raises(bloomsled.InvalidConfig):
        bloomsled.Filter(0)
    with pytest.raises(bloomsled.InvalidConfig):
        bloomsled.Filter(100, fpr=1.5)
    with pytest.raises(bloomsled.InvalidConfig):
        bloomsled.Db(str(tmp_path / "db"), fpr=0.0)
    with bloomsled.Db(str(tmp_path / "db2")) as db:
        with pytest.raises(TypeError):
            db.insert(1, b"v")
        with pytest.raises(TypeError):
            db.contains_many([b"a", 3])
        with pytest.raises(bloomsled.InvalidConfig):
            db.open_tree("__bloomsled_meta")
    with pytest.raises(bloomsled.Error):
        bloomsled.Db(str(tmp_path / "file") + "/\0bad")


def test_filter_add_says_new():
    # Guards the meaning of Filter::insert's bool through the rename of issue 27.
    f = bloomsled.Filter(1_000, fpr=0.01)
    assert f.add("https://example.com/") is True
    assert f.add(b"https://example.com/") is False
    assert "https://example.com/" in f
    assert f.add_many(["a", "b", "a"]) == [True, True, False]


def test_filter_update_contains_many_and_bytes_round_trip():
    f = bloomsled.Filter(10_000, fpr=0.001)
    keys = [f"key-{i}".encode() for i in range(5_000)]
    f.update(keys)
    f.update(k.decode() for k in keys[:10])  # any iterable, str or bytes
    assert all(f.contains_many(keys))
    absent = [f"other-{i}" for i in range(20_000)]
    fp = sum(f.contains_many(absent))
    assert fp < 20_000 * 0.01, fp
    data = f.to_bytes()
    g = bloomsled.Filter.from_bytes(data)
    assert all(g.contains_many(keys))
    assert g.contains_many(absent) == f.contains_many(absent)
    s = g.stats()
    assert s["capacity"] == 10_000 and s["items"] == f.stats()["items"] and s["num_hashes"] >= 1
    with pytest.raises(bloomsled.CorruptError):
        bloomsled.Filter.from_bytes(data[: len(data) // 2])
    bad = bytearray(data)
    bad[len(bad) // 2] ^= 0xFF
    with pytest.raises(bloomsled.CorruptError):
        bloomsled.Filter.from_bytes(bytes(bad))
    with pytest.raises(bloomsled.CorruptError):
        bloomsled.Filter.from_bytes(b"not a filter at all")


def test_counting_db_removes(tmp_path):
    with bloomsled.Db(str(tmp_path / "db"), expected_items=1_000, counting=True) as db:
        db.insert("a", "1")
        assert db.may_contain("a")
        db.remove("a")
        assert not db.may_contain("a")
        assert db.stats()["mode"] == "counting"


def test_sets_and_prefix_items(tmp_path):
    path = str(tmp_path / "db")
    with bloomsled.Db(path) as db:
        assert db.add_to_set(b"b1", b"aaaa")
        assert db.add_to_set(b"b1", "bbbb")
        assert not db.add_to_set(b"b1", b"aaaa")  # already there
        assert db.get(b"b1") == b"aaaabbbb"
        assert db.set_contains(b"b1", b"bbbb") and not db.set_contains(b"b1", b"cccc")
        assert not db.set_contains(b"nothing", b"aaaa")
        with pytest.raises(bloomsled.CorruptError):
            db.add_to_set(b"b1", b"abc")  # 8 bytes are not a set of 3-byte members
        with pytest.raises(ValueError):
            db.add_to_set(b"b1", b"")
        db.insert(b"a", b"1")
        db.insert(b"p-x", b"2")
        db.insert(b"q", b"3")
        assert [k for k, _ in db.items(prefix=b"p-")] == [b"p-x"]
        assert [k for k, _ in db.items(prefix=b"b")] == [b"b1"]
        assert list(db.items(prefix=b"zz")) == []
    with bloomsled.Db(path) as db:  # reopened (a loaded snapshot): writes still work
        assert db.add_to_set(b"b1", b"cccc") and db.insert_if_absent(b"new")
        assert db.get(b"b1") == b"aaaabbbbcccc"


def test_exception_names_follow_pep8_and_old_names_are_aliases():
    renamed = {
        "InvalidConfig": "InvalidConfigError",
        "ShapeMismatch": "ShapeMismatchError",
        "SharedFilterLost": "SharedFilterLostError",
        "SharedFilterNotFound": "SharedFilterNotFoundError",
    }
    for old, new in renamed.items():
        cls = getattr(bloomsled, new)
        assert cls.__name__ == new
        assert getattr(bloomsled, old) is cls, f"{old} must stay an alias of {new}"
        assert issubclass(cls, bloomsled.Error)
    for name in bloomsled.__all__:
        obj = getattr(bloomsled, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert obj.__name__.endswith("Error"), f"{obj.__name__} is not named ...Error"
    with pytest.raises(bloomsled.InvalidConfigError):
        bloomsled.Filter(0)
