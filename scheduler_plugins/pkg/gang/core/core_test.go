package core_test

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/coach/scheduler_plugins/pkg/gang/core"
	"github.com/coach/scheduler_plugins/pkg/jobs"
)

func view(roles map[jobs.Role]int, minGroup, bound, permitted int, unplaced ...jobs.Pending) jobs.JobView {
	pods := 0
	for _, n := range roles {
		pods += n
	}
	return jobs.JobView{Key: jobs.Key{Namespace: "ns", Name: "j"}, MinGroup: minGroup, Roles: roles,
		Pods: pods, Bound: bound, Permitted: permitted, Unplaced: unplaced}
}

// all is a job of one scheduler, one server and the given workers.
func all(workers int) map[jobs.Role]int {
	return map[jobs.Role]int{jobs.RoleScheduler: 1, jobs.RoleServer: 1, jobs.RoleWorker: workers}
}

func TestAdmit(t *testing.T) {
	tests := []struct {
		name string
		v    jobs.JobView
		want bool
	}{
		{"all roles, enough pods", view(map[jobs.Role]int{jobs.RoleScheduler: 1, jobs.RoleServer: 1, jobs.RoleWorker: 2}, 4, 0, 0), true},
		{"no scheduler", view(map[jobs.Role]int{jobs.RoleServer: 1, jobs.RoleWorker: 2}, 3, 0, 0), false},
		{"no server", view(map[jobs.Role]int{jobs.RoleScheduler: 1, jobs.RoleWorker: 2}, 3, 0, 0), false},
		{"fewer pods than the minimum group", view(map[jobs.Role]int{jobs.RoleScheduler: 1, jobs.RoleServer: 1, jobs.RoleWorker: 1}, 4, 0, 0), false},
		{"empty job", view(map[jobs.Role]int{}, 3, 0, 0), false},
		{"a min-group that cannot be read", func() jobs.JobView {
			v := view(map[jobs.Role]int{jobs.RoleScheduler: 1, jobs.RoleServer: 1, jobs.RoleWorker: 2}, 4, 0, 0)
			v.BadMinGroup = "pod w: annotation coach.io/min-group is \"4 \", not a whole number of pods"
			return v
		}(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, why := core.Admit(tt.v); got != tt.want {
				t.Fatalf("Admit = %v (%s), want %v", got, why, tt.want)
			}
		})
	}
}

func TestGroupFits(t *testing.T) {
	slot := jobs.Request{MilliCPU: 1000, Memory: 1 << 30}
	four := []jobs.Request{slot, slot, slot, slot}
	node := core.Free{MilliCPU: 4000, Memory: 4 << 30, Pods: 110}
	tests := []struct {
		name     string
		free     []core.Free
		inFlight [][]jobs.Request
		demand   []jobs.Request
		want     bool
	}{
		{"fits one node", []core.Free{node}, nil, four, true},
		{"fits across nodes", []core.Free{{MilliCPU: 2000, Memory: 2 << 30, Pods: 9}, {MilliCPU: 2000, Memory: 2 << 30, Pods: 9}}, nil, four, true},
		{"fragmented: total is enough, no node fits a pod", []core.Free{{MilliCPU: 500, Memory: 4 << 30, Pods: 9}, {MilliCPU: 3500, Memory: 4 << 30, Pods: 9}}, nil, four, false},
		{"no room", []core.Free{{MilliCPU: 3000, Memory: 4 << 30, Pods: 9}}, nil, four, false},
		{"pod slots run out", []core.Free{{MilliCPU: 4000, Memory: 4 << 30, Pods: 3}}, nil, four, false},
		{"in-flight group keeps its share", []core.Free{node, node}, [][]jobs.Request{four, four}, four, false},
		{"in-flight group that cannot fit reserves nothing", []core.Free{node}, [][]jobs.Request{append(four, slot)}, four, true},
		{"nothing needed", nil, nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := core.GroupFits(tt.free, tt.inFlight, tt.demand); got != tt.want {
				t.Fatalf("GroupFits = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOutstanding(t *testing.T) {
	w := func(uid string, cpu int64) jobs.Pending {
		return jobs.Pending{UID: types.UID(uid), Role: jobs.RoleWorker, Request: jobs.Request{MilliCPU: cpu}}
	}
	sched := jobs.Pending{UID: "s", Role: jobs.RoleScheduler, Request: jobs.Request{MilliCPU: 500}}
	server := jobs.Pending{UID: "p", Role: jobs.RoleServer, Request: jobs.Request{MilliCPU: 700}}
	placed := func(v jobs.JobView, roles map[jobs.Role]int) jobs.JobView { v.PlacedRoles = roles; return v }
	waiting := func(uids ...string) core.Waiting { // s: the scheduler, p: the server, w…: workers
		out := core.Waiting{Roles: map[jobs.Role]int{}, Pods: map[types.UID]bool{}}
		for _, uid := range uids {
			out.Roles[map[byte]jobs.Role{'s': jobs.RoleScheduler, 'p': jobs.RoleServer, 'w': jobs.RoleWorker}[uid[0]]]++
			out.Pods[types.UID(uid)] = true
		}
		return out
	}
	tests := []struct {
		name    string
		v       jobs.JobView
		waiting core.Waiting
		want    []int64 // millicores of the requests, in order
	}{
		{"nothing placed: each role, then the smallest", view(all(3), 4, 0, 0, w("w0", 100), w("w1", 100), sched, server, w("w2", 900)),
			core.Waiting{}, []int64{500, 700, 100, 100}},
		// before, the three smallest were the workers: a group the roles could not start
		{"workers smallest: the scheduler and server still count", view(all(3), 3, 0, 0, w("w0", 100), w("w1", 100), w("w2", 100), sched, server),
			core.Waiting{}, []int64{500, 700, 100}},
		{"two workers waiting", view(all(3), 4, 0, 0, w("w0", 100), w("w1", 100), sched, server, w("w2", 900)),
			waiting("w0", "w1"), []int64{500, 700}},
		// the small waiting workers hold their nodes: what the group still needs is the large one
		{"small pods waiting, a large one to come", view(all(2), 4, 0, 0, w("w0", 100), sched, server, w("w1", 3000)),
			waiting("s", "p", "w0"), []int64{3000}},
		{"group placed", placed(view(all(3), 3, 2, 1, w("w0", 100)), all(1)), core.Waiting{}, nil},
		{"scheduler bound: the server and a worker", placed(view(all(2), 3, 1, 0, w("w0", 100), server, w("w1", 300)),
			map[jobs.Role]int{jobs.RoleScheduler: 1}), core.Waiting{}, []int64{700, 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int64
			for _, r := range core.Outstanding(tt.v, tt.waiting) {
				got = append(got, r.MilliCPU)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("Outstanding = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNeeded(t *testing.T) {
	workers := func(n int) map[jobs.Role]int { return map[jobs.Role]int{jobs.RoleWorker: n} }
	tests := []struct {
		name     string
		minGroup int
		waiting  map[jobs.Role]int
		role     jobs.Role
		want     bool
	}{
		{"first pod of any role", 3, nil, jobs.RoleWorker, true},
		{"second worker of a group of 3 with no scheduler or server yet", 3, workers(1), jobs.RoleWorker, false},
		{"a missing role always", 3, workers(2), jobs.RoleScheduler, true},
		{"room for more workers beyond the missing roles", 5, workers(1), jobs.RoleWorker, true},
		{"no room left", 5, workers(3), jobs.RoleWorker, false},
		{"roles covered, room left", 4, map[jobs.Role]int{jobs.RoleScheduler: 1, jobs.RoleServer: 1, jobs.RoleWorker: 1}, jobs.RoleWorker, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := view(all(4), tt.minGroup, 0, 0)
			if got := core.Needed(v, tt.waiting, tt.role); got != tt.want {
				t.Fatalf("Needed = %v, want %v (missing %v)", got, tt.want, core.Missing(v, tt.waiting))
			}
		})
	}
}

func TestCompletable(t *testing.T) {
	pending := func(roles ...jobs.Role) []jobs.Pending {
		var out []jobs.Pending
		for _, r := range roles {
			out = append(out, jobs.Pending{Role: r})
		}
		return out
	}
	s, ps, w := jobs.RoleScheduler, jobs.RoleServer, jobs.RoleWorker
	tests := []struct {
		name     string
		v        jobs.JobView
		placed   map[jobs.Role]int
		minGroup int
		without  map[jobs.Role]int
		want     bool
	}{
		{"nothing failed", view(all(2), 3, 0, 0, pending(s, ps, w, w)...), nil, 3, nil, true},
		{"one of two workers failed", view(all(2), 3, 0, 0, pending(s, ps, w, w)...), nil, 3, map[jobs.Role]int{w: 1}, true},
		{"both workers failed: no worker left", view(all(2), 3, 0, 0, pending(s, ps, w, w)...), nil, 3, map[jobs.Role]int{w: 2}, false},
		{"the only scheduler failed", view(all(2), 3, 0, 0, pending(s, ps, w, w)...), nil, 3, map[jobs.Role]int{s: 1}, false},
		{"a worker failed, the group needs all four", view(all(2), 4, 0, 0, pending(s, ps, w, w)...), nil, 4, map[jobs.Role]int{w: 1}, false},
		{"both workers failed, one worker is placed", view(all(3), 3, 1, 0, pending(s, ps, w, w)...), map[jobs.Role]int{w: 1}, 3, map[jobs.Role]int{w: 2}, true},
		{"more failures counted than pods pending", view(all(1), 3, 0, 0, pending(s, ps, w)...), nil, 3, map[jobs.Role]int{w: 3}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.v.PlacedRoles = tt.placed
			if got := core.Completable(tt.v, tt.without); got != tt.want {
				t.Fatalf("Completable = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPermit(t *testing.T) {
	tests := []struct {
		name                      string
		placed, waiting, minGroup int
		covered                   bool
		want                      core.Decision
	}{
		{"first of four waits", 0, 0, 4, false, core.Wait},
		{"third of four waits", 0, 2, 4, true, core.Wait},
		{"fourth of four completes the group", 0, 3, 4, true, core.AllowGroup},
		// a group of workers only: it would hold nodes and never start
		{"enough pods but a role missing waits", 0, 2, 3, false, core.Wait},
		{"extra after the group is bound", 4, 0, 4, true, core.AllowExtra},
		{"group completes with bound pods", 2, 1, 4, true, core.AllowGroup},
		{"partially bound group never lets an extra through alone", 3, 0, 5, true, core.Wait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := core.Permit(tt.placed, tt.waiting, tt.minGroup, tt.covered); got != tt.want {
				t.Fatalf("Permit = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSurelyFitsNeverContradictsGroupFits(t *testing.T) {
	one, two := jobs.Request{MilliCPU: 1000, Memory: 1 << 30}, jobs.Request{MilliCPU: 2000, Memory: 1 << 30}
	tests := []struct {
		name   string
		free   []core.Free
		demand []jobs.Request
		sure   bool
	}{
		{"plenty", []core.Free{{MilliCPU: 8000, Memory: 8 << 30, Pods: 110}}, []jobs.Request{one, two, two}, true},
		{"exactly", []core.Free{{MilliCPU: 4000, Memory: 4 << 30, Pods: 110}}, []jobs.Request{two, two}, true},
		{"fits, but not surely", []core.Free{{MilliCPU: 3000, Memory: 4 << 30, Pods: 110}}, []jobs.Request{one, two}, false},
		{"does not fit", []core.Free{{MilliCPU: 1000, Memory: 4 << 30, Pods: 110}}, []jobs.Request{one, two}, false},
		{"no pod slots", []core.Free{{MilliCPU: 9000, Memory: 9 << 30, Pods: 1}}, []jobs.Request{one, one}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := core.SurelyFits(tt.free, nil, tt.demand)
			if got != tt.sure {
				t.Fatalf("SurelyFits = %v, want %v", got, tt.sure)
			}
			if got && !core.GroupFits(tt.free, nil, tt.demand) {
				t.Fatal("SurelyFits said yes where packing fails")
			}
		})
	}
}
