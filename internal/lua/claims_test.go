package lua_test

import (
	"context"
	"testing"

	"github.com/shaper-io/shaper/internal/lua"
)

// Priority claims: a caller of priority 1 that finds the bucket full
// claims its level, and until it is served (or its claim lapses) a caller
// of a lower priority reserves nothing, even with room in the bucket.
func TestReserveClaims(t *testing.T) {
	r := newQuotaRun(t)
	const iv, wait, ttl = 20000, 40000, 100000 // µs
	res := func(level, waiting, n int64) lua.BucketReply {
		t.Helper()
		rep, err := r.st.Reserve(context.Background(), r.bucket, lua.BucketArgs{Interval: iv, MaxWait: wait, Now: r.now,
			Slots: n, Answers: r.ans, Claims: r.claims, Claim: lua.Claim{Level: level, TTL: ttl, Waiting: waiting}})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if got := res(5, 10, 3); got.Reserved != 3 {
		t.Fatalf("priority 5 on an empty bucket: %d slots, want 3 (up to 40ms ahead)", got.Reserved)
	}
	if got := res(1, 2, 2); got.Reserved != 0 || got.HeldBy != 0 {
		t.Fatalf("priority 1 on a full bucket: %+v, want none reserved, held by nothing but the bucket", got)
	}
	r.advance(iv)
	if got := res(5, 7, 1); got.Reserved != 0 || got.HeldBy != -3 {
		t.Fatalf("priority 5 while priority 1 claims, with room: %+v, want none reserved, held by -3", got)
	}
	if got := res(3, 1, 1); got.Reserved != 0 || got.HeldBy != -3 {
		t.Fatalf("priority 3 while priority 1 claims: %+v, want none reserved, held by -3", got)
	}
	if got := res(1, 2, 2); got.Reserved != 1 {
		t.Fatalf("priority 1 with room for one: %d slots, want 1", got.Reserved)
	}
	r.advance(iv)
	if got := res(5, 7, 1); got.HeldBy != -3 {
		t.Fatalf("priority 5 while one of priority 1 still waits: %+v, want held by -3", got)
	}
	if got := res(1, 1, 1); got.Reserved != 1 {
		t.Fatalf("the last of priority 1: %d slots, want 1", got.Reserved)
	}
	r.advance(iv)
	if got := res(5, 7, 1); got.Reserved != 1 {
		t.Fatalf("priority 5 once priority 1 was served: %+v, want a slot", got)
	}
	// a claim whose claimant stopped asking lapses after its TTL
	r.advance(2 * iv)
	res(5, 7, 2)
	if got := res(2, 1, 1); got.Reserved != 0 {
		t.Fatalf("priority 2 on a full bucket: %+v, want none", got)
	}
	r.advance(iv)
	if got := res(4, 1, 1); got.HeldBy != -3 {
		t.Fatalf("priority 4 within the claim's TTL: %+v, want held by -3", got)
	}
	r.advance(ttl)
	if got := res(4, 1, 1); got.Reserved != 1 {
		t.Fatalf("priority 4 after the claim lapsed: %+v, want a slot", got)
	}
	// no level: claims are neither read nor written
	r.advance(iv)
	res(1, 5, 1)
	res(1, 5, 3)
	if got := res(0, 0, 1); got.HeldBy == -3 {
		t.Fatalf("a caller without a level was held by a claim: %+v", got)
	}
}
