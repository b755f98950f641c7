package shaping_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// ownRedis is a client on a throwaway redis-server of the test's own, for
// counts (INFO commandstats) that nothing else may disturb. The cluster
// pass skips such a test: its Redis would be its own there too, so the
// pass would only run the first pass's test again.
func ownRedis(t *testing.T) *redis.Client {
	t.Helper()
	if redistest.Cluster() {
		t.Skip("runs on a Redis of its own, not on REDIS_CLUSTER_ADDRS")
	}
	return redistest.Own(t)
}
