package fairindex

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/keys"
)

// capHeldPrefix is the start of a held task's entry whose key is at its
// cap on calls in flight: lua/prelude_capheld.lua writes
// "~<len(key)>|<key>|<tag>|<member>", one key's entries one lexicographic
// range of fair order's held set; a member ends with its task's id.
func capHeldPrefix(key string) string { return "~" + strconv.Itoa(len(key)) + "|" + key + "|" }

// CapHeld reports whether task id of key waits in fk's held set because
// its key is at its key_concurrency (the take put it there; a call of the
// key that ends brings it back). It reads at most 10,000 of the key's
// held tasks.
func CapHeld(ctx context.Context, rdb redis.UniversalClient, fk keys.FairKeys, key, id string) (bool, error) {
	p := capHeldPrefix(key)
	ms, err := rdb.ZRangeByLex(ctx, fk.Held, &redis.ZRangeBy{Min: "[" + p, Max: "[" + p + "\xff", Count: 10000}).Result()
	if err != nil {
		return false, err
	}
	for _, m := range ms {
		if strings.HasSuffix(m, id) {
			return true, nil
		}
	}
	return false, nil
}
