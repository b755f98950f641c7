package shaping

import "github.com/shaper-io/shaper/clock"

// Clock is the process's own clock as the dispatcher sees it (package
// clock's, shared with limiters and queue): the time schedules are read
// at, the local side of the Redis clock offset, and every wait of the
// release path, the control loop and the liveness loop. Slot times and
// bucket state stay on the Redis clock (the shaping script reads Redis
// TIME), so a Clock never moves the shared schedule of releases; it only
// moves when this process wakes up to use them. A Clock other than
// clock.Real also dates the adaptive rate's steps (see Config.Clock).
//
// The zero Config.Clock (nil) is clock.Real. Tests pass a fake one that
// advances by hand, so control, schedule, adaptive and late-skip
// behaviour can be checked without wall-clock waits.
type Clock = clock.Clock

// Timer is one pending wake-up of a Clock (clock.Timer).
type Timer = clock.Timer
