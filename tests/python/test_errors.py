# SPDX-License-Identifier: Apache-2.0
# Bad arguments and bad strings raise the right gpushare exception, naming the bad value.
import pytest

import gpushare
from conftest import MiB


@pytest.mark.parametrize("setting, value, shown", [
    ("memory_limit", "4GB?", "4GB?"),
    ("memory_limit", "-1", "-1"),
    ("memory_guarantee", "banana", "banana"),
    ("priority", "urgent", "urgent"),
    ("priority", 9, "9"),
    ("share", "banana", "banana"),
    ("share", 0, "0"),
    ("quantum", "5 parsecs", "5 parsecs"),
    ("quantum", -1.0, "-1"),
    ("compute_limit", "150%", "150%"),
    ("compute_limit", 30, "30"),
    ("handover", "sometimes", "sometimes"),
    ("max_guard", "banana", "banana"),
    ("capacity", "lots", "lots"),
    ("table_mode", "world", "world"),
])
def test_bad_settings_raise_invalid_argument_naming_the_value(key, settings, setting, value,
                                                              shown):
    with pytest.raises(gpushare.InvalidArgument) as e:
        gpushare.Session(key, **dict(settings, **{setting: value}))
    assert e.value.code == "invalid_argument"
    assert isinstance(e.value, ValueError)
    assert shown in str(e.value)


@pytest.mark.parametrize("setting, value", [
    ("memory_limit", "4GB?"),
    ("priority", "urgent"),
    ("share", -3),
    ("quantum", "0us"),
])
def test_bad_changes_raise_and_change_nothing(key, settings, setting, value):
    with gpushare.Session(key, **settings) as s:
        before = s.info()
        with pytest.raises(gpushare.InvalidArgument):
            s.configure(**{setting: value})
        after = s.info()
        assert (after.priority, after.share, after.memory_limit, after.quantum_ns) == (
            before.priority, before.share, before.memory_limit, before.quantum_ns)


def test_bad_sizes_and_timeouts(key, settings):
    with gpushare.Session(key, **settings) as s:
        with pytest.raises(gpushare.InvalidArgument, match="-1"):
            s.reserve(-1)
        with pytest.raises(gpushare.InvalidArgument, match="percentage"):
            s.reserve("30%")
        with pytest.raises(gpushare.InvalidArgument, match="4GB\\?"):
            s.try_reserve("4GB?")
        with pytest.raises(gpushare.InvalidArgument, match="-2"):
            s.reserve(MiB, timeout=-2)
        with pytest.raises(gpushare.InvalidArgument, match="soon"):
            s.reserve(MiB, timeout="soon")
        with pytest.raises(TypeError, match="bytes must be"):
            s.reserve([1])
        with pytest.raises(TypeError, match="timeout must be"):
            s.reserve(MiB, timeout=[1])
        assert s.info().reserved == 0


def test_unknown_settings_are_type_errors_listing_the_known_ones(key, settings):
    with pytest.raises(TypeError, match="unknown setting 'memory'.*memory_limit"):
        gpushare.Session(key, memory="1GiB", **settings)
    with gpushare.Session(key, **settings) as s:
        with pytest.raises(TypeError, match="unknown setting 'name'"):
            s.configure(name="x")
    with pytest.raises(gpushare.InvalidArgument, match="sometimes"):
        gpushare.Table.open(key, "sometimes", domain=settings["domain"])


def test_every_code_has_its_class():
    codes = ["invalid_argument", "invalid_environment", "table_incompatible", "table_corrupt",
             "table_busy", "no_space", "permission_denied", "no_free_slot",
             "guarantee_unavailable", "over_limit", "exceeds_capacity", "timeout",
             "session_closed", "system_error", "no_device", "cuda_error", "no_such_table",
             "bad_directory"]
    assert sorted(gpushare.errors_by_code) == sorted(codes)
    for code, cls in gpushare.errors_by_code.items():
        assert issubclass(cls, gpushare.Error)
        assert cls.code == code
        assert cls.__module__ == "gpushare"
        assert getattr(gpushare, cls.__name__) is cls
    assert issubclass(gpushare.Timeout, TimeoutError)
    assert issubclass(gpushare.InvalidArgument, ValueError)
    assert issubclass(gpushare.NoSuchTable, FileNotFoundError)
    assert issubclass(gpushare.BadDirectory, NotADirectoryError)
    assert issubclass(gpushare.PermissionDenied, PermissionError)
