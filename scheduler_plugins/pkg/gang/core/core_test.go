package core_test

import (
	"testing"

	"github.com/coach/scheduler_plugins/pkg/gang/core"
	"github.com/coach/scheduler_plugins/pkg/jobs"
)

func view(roles map[jobs.Role]int, minGroup, bound, permitted int, unplaced ...jobs.Request) jobs.JobView {
	pods := 0
	for _, n := range roles {
		pods += n
	}
	return jobs.JobView{Key: jobs.Key{Namespace: "ns", Name: "j"}, MinGroup: minGroup, Roles: roles,
		Pods: pods, Bound: bound, Permitted: permitted, Unplaced: unplaced}
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
	small, big := jobs.Request{MilliCPU: 100}, jobs.Request{MilliCPU: 900}
	tests := []struct {
		name    string
		v       jobs.JobView
		waiting int
		want    int
	}{
		{"nothing placed", view(map[jobs.Role]int{jobs.RoleWorker: 4}, 4, 0, 0, small, small, big, big), 0, 4},
		{"two waiting", view(map[jobs.Role]int{jobs.RoleWorker: 4}, 4, 0, 0, small, small, big, big), 2, 2},
		{"group placed", view(map[jobs.Role]int{jobs.RoleWorker: 5}, 4, 3, 1, small), 0, 0},
		{"fewer unplaced than needed", view(map[jobs.Role]int{jobs.RoleWorker: 2}, 4, 0, 0, small), 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := core.Outstanding(tt.v, tt.waiting)
			if len(got) != tt.want {
				t.Fatalf("Outstanding = %v, want %d requests", got, tt.want)
			}
		})
	}
}

func TestPermit(t *testing.T) {
	tests := []struct {
		name                      string
		placed, waiting, minGroup int
		want                      core.Decision
	}{
		{"first of four waits", 0, 0, 4, core.Wait},
		{"third of four waits", 0, 2, 4, core.Wait},
		{"fourth of four completes the group", 0, 3, 4, core.AllowGroup},
		{"group of one", 0, 0, 1, core.AllowGroup},
		{"extra after the group is bound", 4, 0, 4, core.AllowExtra},
		{"group completes with bound pods", 2, 1, 4, core.AllowGroup},
		{"partially bound group never lets an extra through alone", 3, 0, 5, core.Wait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := core.Permit(tt.placed, tt.waiting, tt.minGroup); got != tt.want {
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
