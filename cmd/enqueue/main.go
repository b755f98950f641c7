// Command enqueue puts tasks into shaper's downstream queues through their
// admission limiters: one task from flags, or many from JSON Lines on stdin
// or a file. See docs/enqueue.md, or run enqueue -h.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/shaper-io/shaper/internal/enqueuecli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := enqueuecli.Main(ctx, os.Args[1:], enqueuecli.Stdio())
	stop()
	os.Exit(code)
}
