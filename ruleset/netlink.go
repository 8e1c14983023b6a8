package ruleset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/aisb-dev/aisb/contract"
)

// ErrMismatch is wrapped by every read-back difference Verify finds.
var ErrMismatch = errors.New("installed ruleset differs from the policy")

func (rs *Ruleset) table() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}
}

func (rs *Ruleset) chain(t *nftables.Table) *nftables.Chain {
	drop := nftables.ChainPolicyDrop
	return &nftables.Chain{
		Name:     ChainName,
		Table:    t,
		Type:     nftables.ChainTypeFilter,
		Hooknum:  nftables.ChainHookOutput,
		Priority: nftables.ChainPriorityFilter,
		Policy:   &drop,
	}
}

func (rs *Ruleset) natChain(t *nftables.Table) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{
		Name:     NATChainName,
		Table:    t,
		Type:     nftables.ChainTypeNAT,
		Hooknum:  nftables.ChainHookOutput,
		Priority: nftables.ChainPriorityNATDest,
		Policy:   &accept,
	}
}

// ctStatusDNAT is IPS_DST_NAT, the conntrack status bit of a flow whose
// destination a nat rule changed.
const ctStatusDNAT = 1 << 5

func skuid() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(contract.AgentUID)},
	}
}

// dnatTo loads the endpoint into registers 1 and 2 and rewrites the
// destination to it.
func dnatTo(e contract.Endpoint) []expr.Any {
	addr := e.Addr.As4()
	port := make([]byte, 2)
	binary.BigEndian.PutUint16(port, e.Port)
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: addr[:]},
		&expr.Immediate{Register: 2, Data: port},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1, RegProtoMin: 2, RegProtoMax: 2, Specified: true},
	}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

// Exprs is the netlink form of one rule, the same rule Text prints.
func (r Rule) Exprs() []expr.Any {
	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	switch r.Kind {
	case DNATed:
		return []expr.Any{
			&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(ctStatusDNAT),
				Xor:  binaryutil.NativeEndian.PutUint32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
			accept,
		}
	case RejectTCP:
		return append(l4proto(unix.IPPROTO_TCP), &expr.Reject{Type: unix.NFT_REJECT_TCP_RST})
	case RejectAll:
		return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}}
	case RedirectNet:
		network := r.Net.Addr().As4()
		exprs := append(skuid(),
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: net.CIDRMask(r.Net.Bits(), 32), Xor: []byte{0, 0, 0, 0}},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: network[:]},
		)
		exprs = append(exprs, l4proto(unix.IPPROTO_TCP)...)
		exprs = append(exprs,
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, r.DPort)},
		)
		return append(exprs, dnatTo(r.To)...)
	case RedirectDNS:
		exprs := append(skuid(), l4proto(r.Proto)...)
		exprs = append(exprs,
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, 53}},
		)
		return append(exprs, dnatTo(r.To)...)
	case Loopback:
		// oif "lo": the loopback device is always ifindex 1.
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyOIF, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(1)},
			accept,
		}
	case Established:
		return []expr.Any{
			&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
				Xor:  binaryutil.NativeEndian.PutUint32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
			accept,
		}
	case SocketUID:
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(r.UID)},
			accept,
		}
	default:
		port := make([]byte, 2)
		binary.BigEndian.PutUint16(port, r.To.Port)
		var daddr []expr.Any
		if r.Kind == TCPTo {
			addr := r.To.Addr.As4()
			daddr = []expr.Any{
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr[:]},
			}
		} else {
			// ip daddr NET: mask the destination, then compare with the network.
			network := r.Net.Addr().As4()
			mask := net.CIDRMask(r.Net.Bits(), 32)
			daddr = []expr.Any{
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: network[:]},
			}
		}
		exprs := []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		}
		exprs = append(exprs, daddr...)
		return append(exprs,
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: port},
			accept,
		)
	}
}

// Apply replaces the namespace's whole ruleset with this one in a single
// netlink batch: nothing that was there before survives, and the table exists
// either complete or not at all.
func (rs *Ruleset) Apply(c *nftables.Conn) error {
	c.FlushRuleset()
	t := c.AddTable(rs.table())
	ch := c.AddChain(rs.chain(t))
	for _, r := range rs.Rules {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: r.Exprs()})
	}
	if len(rs.Redirect) > 0 {
		nat := c.AddChain(rs.natChain(t))
		for _, r := range rs.Redirect {
			c.AddRule(&nftables.Rule{Table: t, Chain: nat, Exprs: r.Exprs()})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("send batch: %w", err)
	}
	return nil
}

// Verify reads the namespace's ruleset back from the kernel and compares it
// with this one field by field: exactly one table, one chain with the right
// family, type, hook, priority and drop policy, and exactly these rules.
func (rs *Ruleset) Verify(c *nftables.Conn) error {
	mismatch := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrMismatch, fmt.Sprintf(format, args...))
	}
	tables, err := c.ListTables()
	if err != nil {
		return fmt.Errorf("list tables: %w", err)
	}
	if len(tables) != 1 || tables[0].Name != TableName || tables[0].Family != nftables.TableFamilyINet {
		var names []string
		for _, t := range tables {
			names = append(names, fmt.Sprintf("%d/%s", t.Family, t.Name))
		}
		return mismatch("want only table inet %s, have %v", TableName, names)
	}
	chains, err := c.ListChains()
	if err != nil {
		return fmt.Errorf("list chains: %w", err)
	}
	type chainRules struct {
		want  *nftables.Chain
		rules []Rule
	}
	wants := []chainRules{{rs.chain(tables[0]), rs.Rules}}
	if len(rs.Redirect) > 0 {
		wants = append(wants, chainRules{rs.natChain(tables[0]), rs.Redirect})
	}
	if len(chains) != len(wants) {
		return mismatch("want %d chain(s), have %d", len(wants), len(chains))
	}
	for _, w := range wants {
		var got *nftables.Chain
		for _, ch := range chains {
			if ch.Name == w.want.Name && ch.Table != nil && ch.Table.Name == TableName {
				got = ch
			}
		}
		want := w.want
		switch {
		case got == nil:
			return mismatch("no chain %q", want.Name)
		case got.Type != want.Type:
			return mismatch("chain %s type %q", want.Name, got.Type)
		case got.Hooknum == nil || *got.Hooknum != *want.Hooknum:
			return mismatch("chain %s hook is not output", want.Name)
		case got.Priority == nil || *got.Priority != *want.Priority:
			return mismatch("chain %s priority is not %d", want.Name, *want.Priority)
		case got.Policy == nil || *got.Policy != *want.Policy:
			return mismatch("chain %s policy is not %d", want.Name, *want.Policy)
		}
		rules, err := c.GetRules(tables[0], got)
		if err != nil {
			return fmt.Errorf("list rules: %w", err)
		}
		if len(rules) != len(w.rules) {
			return mismatch("chain %s: want %d rules, have %d", want.Name, len(w.rules), len(rules))
		}
		for i, r := range rules {
			if !reflect.DeepEqual(r.Exprs, w.rules[i].Exprs()) {
				return mismatch("chain %s: rule %d is not %q (have %s)", want.Name, i, w.rules[i].text(), describe(r.Exprs))
			}
		}
	}
	return nil
}

func describe(exprs []expr.Any) string {
	var b strings.Builder
	for _, e := range exprs {
		fmt.Fprintf(&b, "%T%+v ", e, e)
	}
	return b.String()
}
