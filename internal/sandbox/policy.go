package sandbox

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/aisb-dev/aisb/contract"
)

// WritePolicy creates dir and writes the session policy p in it
// (contract.PolicyFile): the directory Options.PolicyDir names, mounted
// read-only at contract.PolicyDir. The sandbox's root (a subordinate uid
// without CAP_DAC_OVERRIDE) reads it before the privilege drop, so both are
// made readable by all (0755, 0644) whatever the user's umask; the
// directory around dir should be the user's alone.
func WritePolicy(dir string, p contract.Policy) error {
	b, err := p.Marshal()
	if err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	f := filepath.Join(dir, contract.PolicyFile)
	if err := os.WriteFile(f, b, 0o644); err != nil {
		return err
	}
	return os.Chmod(f, 0o644)
}

// TellGateReady creates the entrypoint's word that the gate is ready
// (contract.GateReadyFile) in the policy's directory dir; a policy with
// AwaitGate makes the entrypoint wait for it before it execs the command.
func TellGateReady(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, contract.GateReadyFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		return fmt.Errorf("tell the sandbox its gate is ready: %w", err)
	}
	return nil
}
