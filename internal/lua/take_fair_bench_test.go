package lua_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/internal/fairindex"
	"github.com/shaper-io/shaper/internal/lua"
)

// BenchmarkFairTakeDeep is one fair take of one task from the middle of
// asynq's pending list, at two backlogs: key A's tasks enqueued first, then
// key B's, so B's next task sits in the middle of the list. "numbered" is
// take.lua (the task found from its number); "lrem" is the list removal by
// value a take would need without the numbers, at the same place. Each
// taken task is parked again, untimed, so the backlog stays the same.
//
//	go test ./internal/lua -run '^$' -bench FairTakeDeep -benchtime 2000x
func BenchmarkFairTakeDeep(b *testing.B) {
	for _, n := range []int{1000, 60000} {
		b.Run(fmt.Sprintf("backlog=%d", n), func(b *testing.B) {
			ctx := context.Background()
			rdb, _, sp, q, fk, fq, cl := fairRig(b)
			f := &fairindex.Fairness{}
			for _, key := range []string{"A", "B"} {
				for range n / 2 {
					info, err := cl.Enqueue(asynq.NewTask("job", nil), asynq.Queue(sp.Queue("d1")))
					if err != nil {
						b.Fatal(err)
					}
					if _, err := fq.Park(ctx, "d1", f, info.ID, key, 1, time.Time{}); err != nil {
						b.Fatal(err)
					}
				}
			}
			st := lua.New(rdb)
			args := lua.TakeArgs{Bucket: sp.Bucket("d1"), Queue: q, Slots: 1, Budget: 1 << 30,
				Lease: time.Hour, Maintained: sp.TakeMaintained("d1"), MaintainEvery: time.Hour,
				Fair: &fk, FairTTL: fairindex.KeyTTL}
			back := func(id, key string) {
				rdb.LRem(ctx, q.Active(), 1, id)
				rdb.ZRem(ctx, q.Lease(), id)
				rdb.HSet(ctx, q.Task(id), "state", "pending")
				rdb.LPush(ctx, q.Pending(), id)
				if _, err := fq.Park(ctx, "d1", f, id, key, 1, time.Time{}); err != nil {
					b.Fatal(err)
				}
			}
			b.Run("numbered", func(b *testing.B) {
				for range b.N {
					rep, err := st.Take(ctx, args)
					if err != nil || len(rep.Tasks) != 1 {
						b.Fatalf("took %d (%v), want 1", len(rep.Tasks), err)
					}
					b.StopTimer()
					back(rep.Tasks[0].ID, "A") // any key: it only sets the task's tag
					b.StartTimer()
				}
			})
			b.Run("lrem", func(b *testing.B) {
				mid := rdb.LIndex(ctx, q.Pending(), int64(n/2)).Val()
				for range b.N {
					if err := rdb.LRem(ctx, q.Pending(), 1, mid).Err(); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					rdb.LInsert(ctx, q.Pending(), "BEFORE", rdb.LIndex(ctx, q.Pending(), int64(n/2)).Val(), mid)
					b.StartTimer()
				}
			})
		})
	}
}
