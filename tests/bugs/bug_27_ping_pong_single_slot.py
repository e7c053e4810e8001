"""xfail: two wave groups exchange tiles through LDS in alternating producer/consumer roles
(ping-pong) but with a single slot: a group's next tile overwrites its half of the buffer in
the phase where its partner is still reading the previous one (write-after-read race)."""

import lane_programs as P

KERNEL = P.ping_pong(slots=1)
FIXED = P.ping_pong()
EXPECT = [
    "lds-race: this write may race",
    "read by wave \\d lane \\d+ at .*lane_programs.py",
    "confirmed by concrete replay",
]
