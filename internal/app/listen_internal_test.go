package app

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The -listen flag wins over SHAPER_LISTEN; with neither, nothing replaces
// http.listen.
func TestListenOf(t *testing.T) {
	t.Parallel()
	for i, tt := range []struct {
		flag, env string
		want      Listen
	}{
		{"", "", Listen{}},
		{"127.0.0.1:9001", "", Listen{Addr: "127.0.0.1:9001", From: "-listen"}},
		{"", "127.0.0.1:9002", Listen{Addr: "127.0.0.1:9002", From: "SHAPER_LISTEN"}},
		{"127.0.0.1:9001", "127.0.0.1:9002", Listen{Addr: "127.0.0.1:9001", From: "-listen"}},
	} {
		if got := ListenOf(tt.flag, tt.env); got != tt.want {
			t.Errorf("step %d: ListenOf(%q, %q) = %+v, want %+v", i, tt.flag, tt.env, got, tt.want)
		}
	}
}

// A taken address's error names where the address came from and how to
// give this process another; any other error is left as it is.
func TestAddrInUseNamesTheSource(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	_, taken := net.Listen("tcp", addr)
	if !errors.Is(taken, syscall.EADDRINUSE) {
		t.Fatalf("second listen on %s: %v, want EADDRINUSE", addr, taken)
	}
	next := "127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port+1)
	for _, from := range []string{"http.listen in /etc/shaper.yaml", "-listen", "SHAPER_LISTEN"} {
		got := addrInUse(taken, addr, from).Error()
		for _, want := range []string{"address already in use", "(the address is from " + from + ";",
			"-listen ADDR or SHAPER_LISTEN=ADDR", "e.g. -listen " + next} {
			if !strings.Contains(got, want) {
				t.Errorf("from %s: %q, want it to contain %q", from, got, want)
			}
		}
		if !errors.Is(addrInUse(taken, addr, from), syscall.EADDRINUSE) {
			t.Errorf("from %s: the error no longer wraps EADDRINUSE", from)
		}
	}
	other := errors.New("listen tcp: lookup nohost: no such host")
	if got := addrInUse(other, "nohost:80", "-listen"); got != other {
		t.Errorf("another error became %v, want it unchanged", got)
	}
}
