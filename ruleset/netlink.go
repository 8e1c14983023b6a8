package ruleset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"reflect"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
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

// Exprs is the netlink form of one rule, the same rule Text prints.
func (r Rule) Exprs() []expr.Any {
	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	switch r.Kind {
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
	if len(chains) != 1 {
		return mismatch("want one chain, have %d", len(chains))
	}
	got, want := chains[0], rs.chain(tables[0])
	switch {
	case got.Name != want.Name || got.Table == nil || got.Table.Name != TableName:
		return mismatch("chain %q", got.Name)
	case got.Type != want.Type:
		return mismatch("chain type %q", got.Type)
	case got.Hooknum == nil || *got.Hooknum != *want.Hooknum:
		return mismatch("chain hook is not output")
	case got.Priority == nil || *got.Priority != *want.Priority:
		return mismatch("chain priority is not filter")
	case got.Policy == nil || *got.Policy != nftables.ChainPolicyDrop:
		return mismatch("chain policy is not drop")
	}
	rules, err := c.GetRules(tables[0], got)
	if err != nil {
		return fmt.Errorf("list rules: %w", err)
	}
	if len(rules) != len(rs.Rules) {
		return mismatch("want %d rules, have %d", len(rs.Rules), len(rules))
	}
	for i, r := range rules {
		if !reflect.DeepEqual(r.Exprs, rs.Rules[i].Exprs()) {
			return mismatch("rule %d is not %q", i, rs.Rules[i].text())
		}
	}
	return nil
}
