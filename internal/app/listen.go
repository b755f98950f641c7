package app

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
)

// ListenEnv is the environment variable that gives the HTTP address, as
// the -listen flag does; the flag wins when both are set.
const ListenEnv = "SHAPER_LISTEN"

// Listen is an HTTP address given to the shaper command, and where it was
// given ("-listen" or ListenEnv). With a config it replaces http.listen;
// without one it is the quick start's address. The zero Listen gives none.
type Listen struct {
	Addr string
	From string
}

// ListenOf picks the HTTP address of the command line: the -listen flag's
// value, else the SHAPER_LISTEN environment variable's, else none.
func ListenOf(flagValue, env string) Listen {
	switch {
	case flagValue != "":
		return Listen{Addr: flagValue, From: "-listen"}
	case env != "":
		return Listen{Addr: env, From: ListenEnv}
	}
	return Listen{}
}

// addrInUse explains err when it is "address already in use": which
// setting gave addr (from) and how to give this process another. Any
// other err comes back as it is.
func addrInUse(err error, addr, from string) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	other := "127.0.0.1:8081"
	if host, port, perr := net.SplitHostPort(addr); perr == nil {
		if p, aerr := strconv.Atoi(port); aerr == nil && p > 0 && p < 65535 {
			other = net.JoinHostPort(host, strconv.Itoa(p+1))
		}
	}
	return fmt.Errorf("%w (the address is from %s; another process holds it: give this one its own with -listen ADDR or %s=ADDR, e.g. -listen %s)",
		err, from, ListenEnv, other)
}
