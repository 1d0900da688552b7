// Package core holds the gang decisions as plain functions of plain data, so
// they are tested without a scheduler: whether a job may enter the queue,
// whether its minimum group fits the free capacity, and what Permit does.
package core

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/coach/scheduler_plugins/pkg/jobs"
)

// Admit says whether a job's pods may be scheduled at all (thesis
// Algorithm 2, made strict): every role must exist, and the job must have at
// least its minimum group of pods, since a smaller job could never start.
func Admit(v jobs.JobView) (bool, string) {
	if v.BadMinGroup != "" {
		return false, fmt.Sprintf("job %s waits until this is fixed: %s", v.Key, v.BadMinGroup)
	}
	if missing := v.MissingRoles(); len(missing) > 0 {
		names := make([]string, len(missing))
		for i, r := range missing {
			names[i] = string(r)
		}
		return false, fmt.Sprintf("job %s has no %s pod yet", v.Key, strings.Join(names, ", "))
	}
	if v.Pods < v.MinGroup {
		return false, fmt.Sprintf("job %s has %d of the %d pods of its minimum group", v.Key, v.Pods, v.MinGroup)
	}
	return true, ""
}

// Free is the capacity left on one node.
type Free struct {
	MilliCPU int64
	Memory   int64
	Pods     int
}

func (f *Free) take(r jobs.Request) bool {
	if f.Pods < 1 || f.MilliCPU < r.MilliCPU || f.Memory < r.Memory {
		return false
	}
	f.Pods--
	f.MilliCPU -= r.MilliCPU
	f.Memory -= r.Memory
	return true
}

// Waiting is a job's pods at the Permit barrier: how many of each role, and
// which (they hold their nodes already).
type Waiting struct {
	Roles map[jobs.Role]int
	Pods  map[types.UID]bool
}

// Outstanding is what a job still needs for its minimum group, given its pods
// waiting at the barrier: a pod of each role that no placed or waiting pod
// has, then more pods up to the group's size. Requests are the smallest ones
// of its unplaced pods that do not wait (an optimistic guess: the check must
// never refuse a group that would fit). A waiting pod holds its node already:
// counted again, as the smallest, it made a group at the barrier whose last
// pod is large reserve a small pod's room, and a younger job took the rest.
func Outstanding(v jobs.JobView, waiting Waiting) []jobs.Request {
	need := room(v, waiting.Roles)
	var out []jobs.Request
	taken := make([]bool, len(v.Unplaced))
	for i, p := range v.Unplaced {
		taken[i] = waiting.Pods[p.UID]
	}
	for _, r := range Missing(v, waiting.Roles) {
		for i, p := range v.Unplaced { // smallest first
			if p.Role == r && !taken[i] {
				taken[i] = true
				out = append(out, p.Request)
				break
			}
		}
	}
	for i, p := range v.Unplaced {
		if len(out) >= need {
			break
		}
		if !taken[i] {
			out = append(out, p.Request)
		}
	}
	return out
}

// Missing lists the roles that neither the job's placed pods nor its pods
// waiting at the barrier have: the minimum group is not complete without them.
func Missing(v jobs.JobView, waiting map[jobs.Role]int) []jobs.Role {
	var out []jobs.Role
	for _, r := range jobs.AllRoles {
		if v.PlacedRoles[r]+waiting[r] == 0 {
			out = append(out, r)
		}
	}
	return out
}

// Needed says whether a pod of role is part of the job's minimum group now:
// one of a missing role always is; one of a role the group already has only
// while the group has room beyond the missing roles. A pod that is not needed
// would hold a node at the barrier that a missing role's pod may need.
func Needed(v jobs.JobView, waiting map[jobs.Role]int, role jobs.Role) bool {
	missing := Missing(v, waiting)
	for _, r := range missing {
		if r == role {
			return true
		}
	}
	return room(v, waiting) > len(missing)
}

// Completable says whether the job's minimum group can still be made of its
// placed pods and its unplaced ones other than those counted in without (by
// role: pods the filters found no node for). Two workers of a group that
// needs one may both fail; only then does the group wait for them.
func Completable(v jobs.JobView, without map[jobs.Role]int) bool {
	left := map[jobs.Role]int{}
	for _, p := range v.Unplaced {
		left[p.Role]++
	}
	total := v.Placed()
	for _, r := range jobs.AllRoles {
		n := max(0, left[r]-without[r])
		if v.PlacedRoles[r]+n == 0 {
			return false
		}
		total += n
	}
	return total >= v.MinGroup
}

// room is how many more pods the minimum group takes beside its placed and
// waiting ones.
func room(v jobs.JobView, waiting map[jobs.Role]int) int {
	n := v.MinGroup - v.Placed()
	for _, w := range waiting {
		n -= w
	}
	return n
}

// GroupFits reports whether demand can be packed into the free capacity after
// the outstanding demands of groups already in flight (those holding pods at
// the Permit barrier) have been set aside: a new group must not take what an
// in-flight group still needs, or both would wait half-placed (the
// interleaving deadlock). Packing is first-fit decreasing, per node.
func GroupFits(free []Free, inFlight [][]jobs.Request, demand []jobs.Request) bool {
	nodes := make([]Free, len(free))
	copy(nodes, free)
	for _, d := range inFlight {
		trial := make([]Free, len(nodes))
		copy(trial, nodes)
		if pack(trial, d) {
			nodes = trial
		}
		// a group that cannot fit anyway reserves nothing: it will be released
	}
	return pack(nodes, demand)
}

// SurelyFits is a cheap sufficient test for GroupFits: if every node is
// counted in slots of the largest request among all demands, and the slots
// outnumber the pods, any packing succeeds. It spares the per-node packing in
// the common case of a cluster with room to spare.
func SurelyFits(free []Free, reserved [][]jobs.Request, demand []jobs.Request) bool {
	var big jobs.Request
	pods := 0
	for _, d := range append(reserved[:len(reserved):len(reserved)], demand) {
		for _, r := range d {
			big.MilliCPU = max(big.MilliCPU, r.MilliCPU)
			big.Memory = max(big.Memory, r.Memory)
			pods++
		}
	}
	slots := 0
	for _, f := range free {
		n := int64(f.Pods)
		if big.MilliCPU > 0 {
			n = min(n, f.MilliCPU/big.MilliCPU)
		}
		if big.Memory > 0 {
			n = min(n, f.Memory/big.Memory)
		}
		if n > 0 {
			slots += int(n)
		}
		if slots >= pods {
			return true
		}
	}
	return slots >= pods
}

func pack(nodes []Free, demand []jobs.Request) bool {
	d := make([]jobs.Request, len(demand))
	copy(d, demand)
	sort.Slice(d, func(a, b int) bool {
		if d[a].MilliCPU != d[b].MilliCPU {
			return d[a].MilliCPU > d[b].MilliCPU
		}
		return d[a].Memory > d[b].Memory
	})
	for _, r := range d {
		placed := false
		for i := range nodes {
			if nodes[i].take(r) {
				placed = true
				break
			}
		}
		if !placed {
			return false
		}
	}
	return true
}

// Decision is what Permit does with a pod.
type Decision int

const (
	// Wait holds the pod at the barrier.
	Wait Decision = iota
	// AllowGroup lets the pod and every waiting pod of its job through:
	// with it the minimum group is complete.
	AllowGroup
	// AllowExtra lets the pod through alone: the job's minimum group is
	// already bound or being bound, so this is an elastic extra.
	AllowExtra
)

func (d Decision) String() string {
	return [...]string{"Wait", "AllowGroup", "AllowExtra"}[d]
}

// Permit decides for one pod of a job whose placed pods (bound or being
// bound, not counting this one) and waiting pods are given; covered says
// whether those pods and this one hold every role between them.
func Permit(placed, waiting, minGroup int, covered bool) Decision {
	switch {
	case placed >= minGroup:
		return AllowExtra
	case placed+waiting+1 >= minGroup && covered:
		return AllowGroup
	default:
		return Wait
	}
}
