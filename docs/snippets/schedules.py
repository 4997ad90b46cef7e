"""Recurring schedules from Python (the same as `kmq schedule …`); the tracker group fires them."""

from kmq import Config, Service

schedules = Service(Config.load()).schedules

schedules.add("nightly-report", "reports", "0 3 * * *", b'{"report": "daily"}', tz="Europe/Berlin",
              missed="fire-last")  # a tick missed while no tracker ran fires once when one is back
schedules.add("heartbeat", "pings", "* * * * * */10", b"ping", missed="skip")  # a 6th field: every 10 seconds
schedules.pause("heartbeat")
for info in schedules.list():
    print(info.schedule.name, info.schedule.cron, info.schedule.tz, "paused" if info.schedule.paused else "next",
          info.next_tick_ms)
schedules.resume("heartbeat")
print("ran now:", schedules.run_now("nightly-report"))
schedules.remove("heartbeat")
