package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/redisconn"
)

// checkRedisAtStart pings Redis before anything starts. Errors that waiting
// cannot cure are returned as one line, so shaper refuses to start: a TLS
// handshake refused (a plain-text probe says whether the server speaks
// plain Redis), or a database index the server does not have. Any other
// failure (Redis down or slow) is returned as warn, to be logged: workers
// hold off until Redis answers.
func checkRedisAtStart(rdb redis.UniversalClient, o redisconn.Options, d time.Duration) (warn, err error) {
	perr := Ping(rdb, d)
	if perr == nil {
		return nil, nil
	}
	var he *redisconn.TLSHandshakeError
	if errors.As(perr, &he) {
		if probePlainRedis(he.Addr, min(d, time.Second)) {
			return nil, fmt.Errorf("redis %s: TLS handshake failed: the server at %s speaks plain-text Redis, not TLS (use redis://, not rediss://)",
				o.String(), he.Addr)
		}
		// A certificate that does not verify or a server that answers
		// something else is permanent; a handshake that timed out may be
		// a slow server, so it only warns, like Redis being down.
		var ne net.Error
		if !errors.Is(he.Err, context.DeadlineExceeded) && !(errors.As(he.Err, &ne) && ne.Timeout()) {
			return nil, fmt.Errorf("redis %s: %v", o.String(), he)
		}
	}
	if msg := perr.Error(); strings.Contains(msg, "DB index is out of range") {
		return nil, fmt.Errorf("config: redis.url: database %d does not exist on the server (%s; Redis has 16 unless its config says more)",
			dbIndex(rdb), msg)
	}
	return perr, nil
}

// probePlainRedis reports whether addr answers a plain-text PING the way
// Redis does (+PONG, or an error reply such as -NOAUTH).
func probePlainRedis(addr string, d time.Duration) bool {
	c, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && (strings.HasPrefix(line, "+") || strings.HasPrefix(line, "-"))
}

func dbIndex(rdb redis.UniversalClient) int {
	if c, ok := rdb.(*redis.Client); ok {
		return c.Options().DB
	}
	return 0
}
