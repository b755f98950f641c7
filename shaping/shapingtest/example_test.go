package shapingtest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shaper-io/shaper/shaping"
	"github.com/shaper-io/shaper/shaping/shapingtest"
)

// A handler's outcomes as the dispatcher sees them.
func Example() {
	ctx := context.Background()
	h := func(_ context.Context, t *shaping.Task) error {
		switch string(t.Payload) {
		case "busy":
			return &shaping.ThrottledError{After: 2 * time.Second}
		case "bad":
			return shaping.Permanent(errors.New("400 bad request"))
		case "down":
			return errors.New("503 with no Retry-After header")
		case "crash":
			panic("nil map")
		}
		return nil
	}
	for _, p := range []string{"ok", "busy", "bad", "down", "crash"} {
		d := shapingtest.Run(ctx, h, shapingtest.NewTask("billing", []byte(p)))
		fmt.Printf("%-5s %-8s pause=%s\n", p, d.Action, d.Pause)
	}
	// An exhausted budget archives what would otherwise be retried.
	d := shapingtest.RunWith(ctx, h, shapingtest.NewTask("billing", []byte("down")), shaping.Budget{Retried: 3, MaxRetry: 3}, false)
	fmt.Println("down, 3 of 3 retries used:", d.Action)
	// Output:
	// ok    complete pause=0s
	// busy  throttle pause=2s
	// bad   archive  pause=0s
	// down  retry    pause=0s
	// crash archive  pause=0s
	// down, 3 of 3 retries used: archive
}
