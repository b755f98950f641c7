package replay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/internal/replay"
)

// The embedded Redis's scripts reply as a real redis-server's do: the
// same values for numbers (truncated), strings, false, nested tables and
// status replies, an error where Redis gives one (an error reply, a
// failed call, a global set), and NOSCRIPT for an unknown SHA until the
// script is loaded by EVAL.
func TestEmbeddedScriptsReplyAsRedis(t *testing.T) {
	t.Parallel()
	e, err := replay.NewEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	real, key := redistest.Client(t), redistest.Prefix(t)+":k"
	for i, src := range []string{
		`return {1, 'a', 3.9, -2.5, false, {2, {'x'}}, true}`,
		`return {1, nil, 3}`,
		`return 'plain'`,
		`return redis.status_reply('DONE')`,
		`return redis.error_reply('boom')`,
		`redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1])`,
		`redis.call('DEL', KEYS[1]); return redis.call('GET', KEYS[1])`,
		`redis.call('HSET', KEYS[1], 'f', 1767366000000000); return redis.call('HMGET', KEYS[1], 'f', 'g')`,
		`return redis.call('SET', KEYS[1], 'v')`,
		`redis.call('SET', KEYS[1], 'v'); return redis.pcall('INCR', KEYS[1])`,
		`redis.call('SET', KEYS[1], 'v'); return redis.call('INCR', KEYS[1])`,
		`x = 1; return 1`,
		`return #ARGV + #KEYS`,
	} {
		want := real.Eval(ctx, src, []string{key}, "v1", 2)
		got := e.Client().Eval(ctx, src, []string{key}, "v1", 2)
		wv, gv := fmt.Sprintf("%#v", want.Val()), fmt.Sprintf("%#v", got.Val())
		if wv != gv || (want.Err() == nil) != (got.Err() == nil) || want.Err() == redis.Nil != (got.Err() == redis.Nil) {
			t.Errorf("script %d %s:\n embedded %s, %v\n    redis %s, %v", i, src, gv, got.Err(), wv, want.Err())
		}
	}
	const src = `return ARGV[1]`
	sha := redis.NewScript(src).Hash()
	if err := e.Client().EvalSha(ctx, sha, nil, "a").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
		t.Errorf("EVALSHA of a script never loaded: %v, want NOSCRIPT", err)
	}
	if v, err := redis.NewScript(src).Run(ctx, e.Client(), nil, "a").Result(); v != "a" || err != nil {
		t.Errorf("Script.Run: %v, %v; want a", v, err)
	}
	if v, err := e.Client().EvalSha(ctx, sha, nil, "b").Result(); v != "b" || err != nil {
		t.Errorf("EVALSHA after EVAL: %v, %v; want b", v, err)
	}
}
