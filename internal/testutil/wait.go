package testutil

import (
	"testing"
	"time"
)

// Poll is how often WaitFor and Eventually check their condition: soon
// enough after it holds, seldom enough not to load a shared machine.
const Poll = 20 * time.Millisecond

// WaitFor checks cond every Poll until it holds, and fails tb (Fatalf,
// naming what) once d has passed without it. Tests poll with a deadline
// instead of sleeping for a guessed time.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Eventually(d, cond) {
		tb.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// Eventually checks cond every Poll until it holds (true) or d has passed
// (false), for a precondition whose absence the assertions after it report.
func Eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(Poll) // poll interval, bounded by the deadline
	}
	return true
}
