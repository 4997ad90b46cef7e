kmq send emails 'in a minute' --delay 60
kmq send emails 'at nine' --at "$(date -u -d 'tomorrow 09:00' +%Y-%m-%dT%H:%M)"    # ISO 8601, UTC without a zone
kmq pause emails --until "$(date -u -d '+10 minutes' +%Y-%m-%dT%H:%M)"
kmq resume emails
kmq purge emails                            # or --before 2026-11-23T12:00
kmq stats --queue emails --json
