package bench

import (
	"sync"

	"github.com/aisb-dev/aisb/gate"
)

// gateAuth holds, for each benchmark gate's address, the
// Proxy-Authorization its sandbox sends: the benchmarks speak to a gate as
// its sandbox does (the gate refuses anyone else).
var gateAuth sync.Map

// asSandbox registers g's token and returns g.
func asSandbox(g *gate.Gate) *gate.Gate {
	gateAuth.Store(g.Addr(), g.ProxyAuthorization())
	return g
}

// authHeader is the Proxy-Authorization line for the gate at addr, or "".
func authHeader(addr string) string {
	if a, ok := gateAuth.Load(addr); ok {
		return "Proxy-Authorization: " + a.(string) + "\r\n"
	}
	return ""
}
