kmq send orders '{"order": 991}' --dedup-id order-991
kmq send orders '{"order": 991}' --dedup-id order-991      # accepted, never handed out
kmq send orders "order {i}" --count 3 --dedup-id 'import-{i}'
kmq schedule add nightly-report --queue reports --cron '0 3 * * *' --tz Europe/Berlin '{"report": "daily"}'
kmq schedule add heartbeat --queue pings --cron '*/5 * * * *' --missed skip ping
kmq schedule list
kmq schedule run-now nightly-report
kmq schedule remove heartbeat
