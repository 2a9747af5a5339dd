"""When schedules tick, and what missed ticks get: pure functions, on given times."""

from __future__ import annotations

from datetime import UTC, datetime

from tasks_backend.model.schedules import MAX_CATCH_UP, ScheduleSpec, grace_ms, plan


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def test_cron_ticks_follow_the_wall_clock_of_the_time_zone_across_daylight_saving_time() -> None:
    spec = ScheduleSpec("daily", "op", cron="0 9 * * *", timezone="Europe/Paris")
    before = spec.next_after(ms("2026-03-27T12:00:00"), 0)
    after = spec.next_after(before, 0)
    assert (before, after) == (ms("2026-03-28T08:00:00"), ms("2026-03-29T07:00:00"))  # 09:00 CET, then CEST
    # 02:30 does not exist on the night clocks go forward; cronsim runs it at the next moment that does.
    skipped = ScheduleSpec("night", "op", cron="30 2 * * *", timezone="Europe/Paris")
    assert skipped.next_after(ms("2026-03-28T12:00:00"), 0) == ms("2026-03-29T01:00:00")


def test_every_tick_of_the_hour_the_clocks_repeat_makes_its_job() -> None:
    # 2025-10-26 in Paris: 02:00 to 02:59 local comes twice, 00:00-00:59 UTC (summer time), then 01:00-01:59 UTC.
    every5 = ScheduleSpec("five", "op", cron="*/5 * * * *", timezone="Europe/Paris")
    tick = ms("2025-10-26T00:00:00")
    while tick < ms("2025-10-26T02:30:00"):  # each tick seen on time: its job, and on to the next
        assert plan(every5, tick, tick + 300, 0, paused=False) == ([tick], tick + 300_000)
        tick += 300_000
    # A ticker back after a stop within the second pass catches up from where it was.
    assert every5.ticks_up_to(ms("2025-10-26T01:12:00"), ms("2025-10-26T00:50:00"), 0, 10) == [
        ms(f"2025-10-26T{t}:00") for t in ("01:10", "01:05", "01:00", "00:55", "00:50")]
    hourly = ScheduleSpec("hourly", "op", cron="0 * * * *", timezone="America/New_York")
    six = ms("2025-11-02T06:00:00")  # 01:00 local, its second pass
    assert plan(hourly, six, six + 300, 0, paused=False) == ([six], ms("2025-11-02T07:00:00"))


def test_a_fixed_time_in_the_hour_the_clocks_repeat_runs_once_and_is_never_in_the_past() -> None:
    nightly = ScheduleSpec("night", "op", cron="30 2 * * *", timezone="Europe/Paris")
    first, tomorrow = ms("2025-10-26T00:30:00"), ms("2025-10-27T01:30:00")
    assert nightly.next_after(ms("2025-10-26T00:10:00"), 0) == first
    # From within the second pass (02:10 local again), the next tick is tomorrow's, not this morning's first.
    assert nightly.next_after(ms("2025-10-26T01:10:00"), 0) == tomorrow
    assert plan(nightly, tomorrow, ms("2025-10-26T01:10:00"), 0, paused=False) == ([], tomorrow)
    # A ticker stopped across both passes finds one tick for the night, not two.
    assert nightly.ticks_up_to(ms("2025-10-26T01:50:00"), ms("2025-10-25T12:00:00"), 0, 10) == [first]


def test_a_tick_missed_in_the_first_pass_through_a_repeated_hour_is_caught_up_from_the_second() -> None:
    # Paris, 2025-10-26: the night's 02:30 is 00:30 UTC (summer time). Tickers down across it and back at 02:10 local
    # in the second pass (01:10 UTC), before 02:30 comes round on the wall clock again: that tick is missed, and
    # catchUp latest gives it its job (reading the wall clock back from 02:10 never meets it).
    nightly = ScheduleSpec("night", "op", cron="30 2 * * *", timezone="Europe/Paris", catch_up="latest")
    first, back = ms("2025-10-26T00:30:00"), ms("2025-10-26T01:10:00")
    assert plan(nightly, first, back, 0, paused=False) == ([first], ms("2025-10-27T01:30:00"))
    assert nightly.ticks_up_to(back, first, 0, 10) == [first]
    every20 = ScheduleSpec("twenty", "op", cron="*/20 * * * *", timezone="America/New_York")
    # 2025-11-02: 01:00-01:59 local comes twice, 05:00-05:59 then 06:00-06:59 UTC; back at 06:05 UTC after a stop
    # from 05:10 UTC, every tick since, in both passes, newest first.
    assert every20.ticks_up_to(ms("2025-11-02T06:05:00"), ms("2025-11-02T05:10:00"), 0, 10) == [
        ms(f"2025-11-02T{t}:00") for t in ("06:00", "05:40", "05:20")]


def test_every_seconds_ticks_count_from_the_anchor() -> None:
    spec = ScheduleSpec("e", "op", every_s=10)
    assert spec.next_after(1_000, 1_000) == 11_000
    assert spec.next_after(25_000, 1_000) == 31_000
    assert spec.ticks_up_to(45_000, 11_000, 1_000, 10) == [41_000, 31_000, 21_000, 11_000]


def test_on_time_ticks_always_run_and_catch_up_decides_the_missed_ones() -> None:
    every2 = {mode: ScheduleSpec("e", "op", every_s=2, catch_up=mode) for mode in ("none", "latest", "all")}
    # Seen 0.3 s after the tick of 12 s, ticks from 2 s to 10 s were missed.
    assert plan(every2["none"], 2_000, 12_300, 0, paused=False) == ([12_000], 14_000)
    assert plan(every2["latest"], 2_000, 12_300, 0, paused=False) == ([10_000, 12_000], 14_000)
    assert plan(every2["all"], 2_000, 12_300, 0, paused=False) == ([2_000, 4_000, 6_000, 8_000, 10_000, 12_000],
                                                                   14_000)
    # Seen 1.5 s late (half the period is 1 s): that tick is missed as well.
    assert plan(every2["none"], 2_000, 13_500, 0, paused=False) == ([], 14_000)
    assert plan(every2["latest"], 2_000, 13_500, 0, paused=False) == ([12_000], 14_000)
    # Paused: nothing, and on to the next tick.
    assert plan(every2["all"], 2_000, 12_300, 0, paused=True) == ([], 14_000)
    # Not due yet: nothing changes.
    assert plan(every2["all"], 14_000, 12_300, 0, paused=False) == ([], 14_000)


def test_all_is_bounded_to_the_newest_missed_ticks() -> None:
    spec = ScheduleSpec("e", "op", every_s=1, catch_up="all")
    fire, following = plan(spec, 1_000, 1_000_000, 0, paused=False)
    assert len(fire) == MAX_CATCH_UP + 1 and fire[-1] == 1_000_000 and following == 1_001_000
    assert grace_ms(2_000) == 1_000 and grace_ms(60_000) == 5_000 and grace_ms(500) == 1_000


def test_ticks_held_by_a_ticker_that_died_are_not_missed() -> None:
    every2 = ScheduleSpec("e", "op", every_s=2, catch_up="none")
    # Taken at 2.05 s (on time), the taker died, its lease lapsed at 7.05 s and another took it at 7.1 s: the ticks
    # the lease hid are on time, though the newest is 1.1 s old.
    assert plan(every2, 2_000, 7_100, 0, paused=False, held=(2_050, 7_050)) == ([2_000, 4_000, 6_000], 8_000)
    # First taken 1.2 s after its tick (missed already, half the period is 1 s): that tick stays missed.
    assert plan(every2, 2_000, 8_300, 0, paused=False, held=(3_200, 8_200)) == ([4_000, 6_000, 8_000], 10_000)
    # After the lapse nobody looked for a while: the ticks after it that were seen late are missed.
    assert plan(every2, 2_000, 12_300, 0, paused=False, held=(2_050, 7_050)) == ([2_000, 4_000, 6_000, 12_000],
                                                                                 14_000)
