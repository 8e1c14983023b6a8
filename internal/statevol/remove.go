package statevol

// A state volume's removal, and the sandboxes that keep it.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containers/podman/v5/libpod/define"
	entitiesTypes "github.com/containers/podman/v5/pkg/domain/entities/types"

	"github.com/aisb-dev/aisb/internal/engine"
	"github.com/aisb-dev/aisb/internal/state"
)

// Remove deletes a state volume and aisb's record of it. A volume in use
// by a sandbox that has not exited is not removed. On a local engine
// (ownersHere), the exited sandbox of a session that just ended, which its
// watchdog removes moments later, is removed first once its aisb has
// exited. On an engine that is not local a sandbox's aisb is not a process
// this host can judge (it may be another host's), so an exited sandbox is
// waited for, as its aisb removes it, and then refused: removing it could
// take the agent's work from an aisb still copying it out.
func Remove(c engine.Engine, recordDir, name string, ownersHere bool) error {
	if _, err := inspect(c, name); err != nil {
		return err
	}
	if err := removeExited(c, name, ownersHere); err != nil {
		return err
	}
	if err := c.VolumeRemove(context.TODO(), name); err != nil {
		return fmt.Errorf("remove state volume %s: %w", name, err)
	}
	return removeRecord(recordDir, name)
}

// ownerExit is how long removeExited waits for the aisb of an exited
// sandbox to exit (it reads the sandbox's end, then returns at once).
const ownerExit = 2 * time.Second

// ErrInUse is a state volume a sandbox still mounts.
var ErrInUse = errors.New("a sandbox still mounts it")

// removeExited removes aisb's exited sandboxes that mount the volume name,
// and refuses when one has not exited (it runs, or is about to), or, with
// !ownersHere, when one is still there after ownerExit.
func removeExited(c engine.Engine, name string, ownersHere bool) error {
	list, err := sandboxesOf(c, name)
	if err != nil {
		return err
	}
	if !ownersHere {
		for deadline := time.Now().Add(ownerExit); len(list) > 0 && allExited(list) && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			if list, err = sandboxesOf(c, name); err != nil {
				return err
			}
		}
	}
	for _, ctr := range list {
		if len(ctr.Names) == 0 {
			continue
		}
		switch {
		case exited(ctr) && ownersHere:
			// Its aisb may still be reading how it ended: a moment.
			owner := ctr.Labels[engine.LabelOwner]
			for deadline := time.Now().Add(ownerExit); owner != "" && state.OwnerAlive(owner) && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			if owner != "" && state.OwnerAlive(owner) {
				return fmt.Errorf("remove state volume %s: the session of %s is still ending; try again in a moment", name, ctr.Names[0])
			}
			if err := engine.Remove(context.TODO(), c, ctr.Names[0]); err != nil {
				return fmt.Errorf("remove state volume %s: %w", name, err)
			}
		case exited(ctr):
			return fmt.Errorf("remove state volume %s: %w: the exited sandbox %s; on an engine that is not local aisb cannot tell whether its session is still ending (its aisb removes it, or its watchdog after a kill), so try again in a moment, or, if no session of it runs anywhere, remove it on the engine's host (podman rm %s)",
				name, ErrInUse, ctr.Names[0], ctr.Names[0])
		default:
			return fmt.Errorf("remove state volume %s: %w: the sandbox %s (%s); end its session first", name, ErrInUse, ctr.Names[0], ctr.State)
		}
	}
	return nil
}

// sandboxesOf lists aisb's sandboxes that mount the volume name.
func sandboxesOf(c engine.Engine, name string) ([]entitiesTypes.ListContainer, error) {
	list, err := c.ContainerList(context.TODO(), map[string][]string{"volume": {name}, "label": {engine.LabelKind + "=sandbox"}})
	if err != nil {
		return nil, fmt.Errorf("remove state volume %s: list its sandboxes: %w", name, err)
	}
	return list, nil
}

func exited(ctr entitiesTypes.ListContainer) bool {
	return ctr.State == define.ContainerStateExited.String() || ctr.State == define.ContainerStateStopped.String()
}

func allExited(list []entitiesTypes.ListContainer) bool {
	for _, ctr := range list {
		if !exited(ctr) {
			return false
		}
	}
	return true
}
