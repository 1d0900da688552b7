// Package gang is Coach's gang admission: a job's pods enter the queue only
// once all its roles (and at least its minimum group of pods) exist; the
// minimum group is then placed all-or-nothing through a Permit barrier; pods
// beyond the minimum are elastic extras placed one by one.
package gang

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/coach/scheduler_plugins/pkg/gang/core"
	"github.com/coach/scheduler_plugins/pkg/jobs"
)

// Name is the plugin's name in the scheduler configuration.
const Name = "CoachGang"

// DefaultPermitTimeoutSeconds bounds how long a partly placed minimum group
// may hold its nodes before all its pods are released and backed off.
const DefaultPermitTimeoutSeconds = 30

// DefaultStarvationSeconds bounds how long younger jobs may overtake a job
// whose minimum group does not fit the free room.
const DefaultStarvationSeconds = 30

// Args are the plugin's arguments (pluginConfig of the profile).
type Args struct {
	// PermitTimeoutSeconds is how long pods wait at the barrier for the rest
	// of their minimum group.
	PermitTimeoutSeconds int64 `json:"permitTimeoutSeconds,omitempty"`
	// StarvationSeconds is how long a job may wait for room while younger
	// jobs' groups and extras take what frees (backfill); after that, the room
	// its minimum group needs is held for it as it frees.
	StarvationSeconds int64 `json:"starvationSeconds,omitempty"`
}

// Plugin implements the gang extension points.
type Plugin struct {
	handle   fwk.Handle
	registry *jobs.Registry
	timeout  time.Duration
	// starvation: after waiting this long, a job's room is held for it (0: never)
	starvation time.Duration

	mu sync.Mutex
	// failed remembers when a job's group last failed for a reason other than
	// capacity (no node passed the filters, or the barrier timed out); such a
	// job does not make younger jobs yield until the entry expires.
	failed map[jobs.Key]time.Time
	// yielded holds jobs whose pods yielded to a job ahead of them; they are
	// activated when that job's group starts or fails.
	yielded map[jobs.Key]struct{}
	// short holds jobs whose minimum group did not fit the free room. A group
	// released from the barrier frees room without a pod event, so they are
	// activated then (a pod going away or a node growing wakes them anyway).
	short map[jobs.Key]struct{}
	// blocked holds, per job whose minimum group is not placed, the pods that
	// found no node in the filters, with their roles. While the group cannot
	// be made without them (core.Completable), their siblings stay out of the
	// barrier until enough of them pass the filters: otherwise the queue
	// (which requeues those pods only on events that may help them) sends the
	// siblings back within milliseconds, they hold the room at the barrier
	// for the whole timeout, and a younger job that would fit never gets it
	// (kubernetes-sigs/scheduler-plugins#713).
	blocked map[jobs.Key]map[types.UID]jobs.Role
	// rejected holds the pods this plugin rejected at the barrier, and
	// waitingSince when each pod began to wait there (the framework's timer
	// rejects it p.timeout later, without the plugin). A rejected pod is
	// still listed among the waiting pods until its binding goroutine wakes,
	// and Allow does nothing for it: a group counted complete with it bound
	// without it. Both forget a pod at its Unreserve, or when it is allowed
	// (and, should neither come, once its wait is long over: forgetOld).
	rejected     map[types.UID]time.Time
	waitingSince map[types.UID]time.Time
}

// refusedKey marks in the cycle state that PreFilter itself refused the pod,
// so PostFilter can tell that from a pod the filters found no node for.
const refusedKey fwk.StateKey = Name + "/refused"

// refused says why PreFilter refused a pod. onlyThisPod: the refusal is about
// this pod, not its job's group (the group, forming at the barrier, does not
// need it yet; or it is an extra that leaves room to another job's group), so
// PostFilter releases, blocks and wakes nothing for it. forRoom: the group
// does not fit the free room, or yields it to jobs ahead; the job keeps its
// place in the queue (it is not marked failed), so once it fits, the jobs
// behind it leave it the room even while it waits out its backoff. yields:
// it yielded, which changes nothing for the other jobs that yielded, so
// PostFilter does not wake them (two yielding jobs woke each other some 3,400
// times a second, and the jobs they yielded to waited out their backoff).
type refused struct{ onlyThisPod, forRoom, yields bool }

func (r refused) Clone() fwk.StateData { return r }

var (
	_ fwk.PreEnqueuePlugin  = &Plugin{}
	_ fwk.PreFilterPlugin   = &Plugin{}
	_ fwk.PostFilterPlugin  = &Plugin{}
	_ fwk.ReservePlugin     = &Plugin{}
	_ fwk.PermitPlugin      = &Plugin{}
	_ fwk.EnqueueExtensions = &Plugin{}
)

// New builds the plugin from its arguments.
func New(_ context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	return NewWithRegistry(h, jobs.Shared(h.SharedInformerFactory()),
		time.Duration(args.PermitTimeoutSeconds)*time.Second).
		WithStarvation(time.Duration(args.StarvationSeconds) * time.Second), nil
}

// WithStarvation sets how long a job may be overtaken before its room is
// held for it; 0, as NewWithRegistry makes it, never holds.
func (p *Plugin) WithStarvation(d time.Duration) *Plugin {
	p.starvation = d
	return p
}

// NewWithRegistry builds the plugin on a given handle and registry (tests).
func NewWithRegistry(h fwk.Handle, r *jobs.Registry, timeout time.Duration) *Plugin {
	return &Plugin{handle: h, registry: r, timeout: timeout, failed: map[jobs.Key]time.Time{},
		yielded: map[jobs.Key]struct{}{}, short: map[jobs.Key]struct{}{}, blocked: map[jobs.Key]map[types.UID]jobs.Role{},
		rejected: map[types.UID]time.Time{}, waitingSince: map[types.UID]time.Time{}}
}

func decodeArgs(obj runtime.Object) (Args, error) {
	args := Args{}
	if obj != nil {
		if err := frameworkruntime.DecodeInto(obj, &args); err != nil {
			return args, fmt.Errorf("decoding %s args: %w", Name, err)
		}
	}
	SetDefaults(&args)
	return args, Validate(args)
}

// SetDefaults fills unset arguments.
func SetDefaults(a *Args) {
	if a.PermitTimeoutSeconds == 0 {
		a.PermitTimeoutSeconds = DefaultPermitTimeoutSeconds
	}
	if a.StarvationSeconds == 0 {
		a.StarvationSeconds = DefaultStarvationSeconds
	}
}

// MaxPermitTimeoutSeconds is the framework's own limit on a Permit wait (15
// minutes): it would cut a longer one short without a word.
const MaxPermitTimeoutSeconds = 15 * 60

// MaxStarvationSeconds bounds the starvation argument (a day): a larger one
// means backfill without end, and past about 292 years the duration wraps
// negative, which would turn the bound off.
const MaxStarvationSeconds = 24 * 60 * 60

// Validate rejects arguments that cannot work.
func Validate(a Args) error {
	if a.PermitTimeoutSeconds < 1 || a.PermitTimeoutSeconds > MaxPermitTimeoutSeconds {
		return fmt.Errorf("%s: permitTimeoutSeconds must be from 1 to %d (the scheduler framework's limit), got %d",
			Name, MaxPermitTimeoutSeconds, a.PermitTimeoutSeconds)
	}
	if a.StarvationSeconds < 1 || a.StarvationSeconds > MaxStarvationSeconds {
		return fmt.Errorf("%s: starvationSeconds must be from 1 to %d (a day), got %d",
			Name, MaxStarvationSeconds, a.StarvationSeconds)
	}
	return nil
}

// Name returns the plugin name.
func (p *Plugin) Name() string { return Name }

// PreEnqueue keeps a job's pods out of the active queue until the job has
// all roles and its minimum group of pods (thesis Algorithm 2).
func (p *Plugin) PreEnqueue(_ context.Context, pod *v1.Pod) *fwk.Status {
	m, ok := jobs.MemberOf(pod)
	if !ok {
		return nil
	}
	p.registry.Observe(pod)
	v, _ := p.registry.View(m.Job)
	if ok, why := core.Admit(v); !ok {
		// a gated pod gets no scheduling condition: say why, as an event, when it changes
		if p.registry.MarkGated(m.Job, why) {
			if rec := p.handle.EventRecorder(); rec != nil {
				rec.Eventf(pod, nil, v1.EventTypeNormal, "WaitingForGang", "Scheduling", "%s", why)
			}
		}
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, why)
	}
	// The queue re-runs PreEnqueue for gated pods only on their own updates,
	// so the pod that completes a job wakes its gated siblings. Activate takes
	// the queue's lock, which is held while PreEnqueue runs: do it later.
	if gated := p.registry.TakeGated(m.Job); len(gated) > 0 {
		go p.activate(klog.Background(), gated, pod)
	}
	return nil
}

// activate moves pods (except skip) to the active queue.
func (p *Plugin) activate(logger klog.Logger, list []*v1.Pod, skip *v1.Pod) {
	pods := make(map[string]*v1.Pod, len(list))
	for _, q := range list {
		if skip == nil || q.UID != skip.UID {
			pods[q.Namespace+"/"+q.Name] = q
		}
	}
	if len(pods) > 0 {
		p.handle.Activate(logger, pods)
	}
}

// yield records that job's pods wait for others: wakeYielded activates them.
func (p *Plugin) yield(job jobs.Key) { p.note(p.yielded, job) }

// note adds job to set, and drops the jobs that are gone, so the set stays
// small even if nothing wakes it for a long time.
func (p *Plugin) note(set map[jobs.Key]struct{}, job jobs.Key) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range set {
		if _, ok := p.registry.View(k); !ok {
			delete(set, k)
		}
	}
	set[job] = struct{}{}
}

// wakeYielded activates the jobs that yielded to one ahead of them, or whose pods
// waited for their group to be placed, and if a group's room was freed, those
// short of room; except the job named (a job that just yielded would wake
// itself, and spin through thousands of cycles a second).
func (p *Plugin) wakeYielded(logger klog.Logger, except jobs.Key, freed bool) {
	sets := []map[jobs.Key]struct{}{p.yielded}
	if freed {
		sets = append(sets, p.short)
	}
	p.mu.Lock()
	var keys []jobs.Key
	for _, set := range sets {
		for k := range set {
			if k != except {
				keys = append(keys, k)
				delete(set, k)
			}
		}
	}
	p.mu.Unlock()
	var pods []*v1.Pod
	for _, k := range keys {
		pods = append(pods, p.registry.Unbound(k)...)
	}
	if len(pods) > 0 {
		go p.activate(logger, pods, nil)
	}
}

// EventsToRegister names the events that may let a rejected or gated pod on:
// a pod of its job appearing or its min-group annotation changing, any pod
// going away (freeing room, or releasing an in-flight group), and nodes
// appearing or growing.
func (p *Plugin) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		// Update: an annotation-only change is a plain Pod/Update, which
		// UpdatePodLabel does not match; the hint skips the other updates
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: p.sameJobAdded},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAllocatable | fwk.UpdateNodeTaint}},
	}, nil
}

func (p *Plugin) sameJobAdded(_ klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	added, ok := newObj.(*v1.Pod)
	if !ok {
		return fwk.Queue, nil
	}
	m, ok := jobs.MemberOf(pod)
	if !ok {
		return fwk.QueueSkip, nil
	}
	// The queue may deliver this event before the registry's own handler:
	// observe the pod here so PreEnqueue sees it.
	p.registry.Observe(added)
	o, member := jobs.MemberOf(added)
	if old, updated := oldObj.(*v1.Pod); updated && maps.Equal(old.Labels, added.Labels) {
		// neither added nor relabelled: only a fixed min-group may let the job on
		if member && o.Job == m.Job && old.Annotations[jobs.AnnotationMinGroup] != added.Annotations[jobs.AnnotationMinGroup] {
			return fwk.Queue, nil
		}
		return fwk.QueueSkip, nil
	}
	if member && (o.Job == m.Job || added.Spec.NodeName != "") {
		// same job: it may now be complete; another job's pod placed: a
		// group this pod yielded to has started, so this one may go next
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// PreFilter refuses a pod whose job's minimum group cannot fit the free
// capacity now, or has a pod the filters found no node for, so no node is
// held for a group that cannot start.
func (p *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	m, ok := jobs.MemberOf(pod)
	if !ok {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	result, status, why := p.preFilter(ctx, m, pod)
	if state != nil && status.IsRejected() {
		state.Write(refusedKey, why)
	}
	return result, status
}

func (p *Plugin) preFilter(ctx context.Context, m jobs.Member, pod *v1.Pod) (*fwk.PreFilterResult, *fwk.Status, refused) {
	v, _ := p.registry.View(m.Job)
	if ok, why := core.Admit(v); !ok {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, why), refused{}
	}
	waiting := p.waitingByJob()
	if v.Placed() >= v.MinGroup { // an elastic extra: placed on its own, after other jobs' minimum groups
		if status := p.extraLeavesRoom(ctx, m.Job, pod, waiting); status != nil {
			return nil, status, refused{onlyThisPod: true}
		}
		return nil, nil, refused{}
	}
	if blocker := p.blockedBy(m.Job, pod); blocker != "" {
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf(
			"job %s: pod %s of its minimum group found no node; the group waits for it", m.Job, blocker)), refused{}
	}
	if !core.Needed(v, waiting[m.Job].Roles, m.Role) {
		// e.g. the third worker of a group of 3 that has no scheduler yet: at
		// the barrier it would hold the node the scheduler needs
		p.yield(m.Job) // woken when the group is placed or fails
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf(
			"job %s: its minimum group waits for a pod of each role (%v missing); this %s pod joins after",
			m.Job, core.Missing(v, waiting[m.Job].Roles), m.Role)), refused{onlyThisPod: true}
	}
	demand := core.Outstanding(v, waiting[m.Job])
	inFlight := p.inFlight(m.Job, waiting)
	free, err := p.freeCapacity()
	if err != nil {
		return nil, fwk.AsStatus(err), refused{}
	}
	if !core.SurelyFits(free, inFlight, demand) && !core.GroupFits(free, inFlight, demand) {
		p.release(ctx, m.Job, "minimum group does not fit")
		p.note(p.short, m.Job)
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf(
			"job %s: %d more pods of its minimum group of %d do not fit the free capacity", m.Job, len(demand), v.MinGroup)), refused{forRoom: true}
	}
	// The queue's order across backoff: pods leave backoff in any order, so
	// the room that the minimum groups of jobs ahead in the queue need (of a
	// higher priority, or older; first first) is set aside like an in-flight
	// group's (GroupFits skips a group that cannot fit anyway); a job behind
	// them that would take it yields. When everything fits, nobody yields.
	reserved, holders, starved := p.ahead(m.Job, waiting, free, inFlight, false)
	yielding := refused{forRoom: true, yields: true}
	if starved != nil {
		p.yieldTo(ctx, m.Job, free, reserved, holders)
		return nil, fwk.NewStatus(fwk.Unschedulable, p.starvedMessage(m.Job, starved)), yielding
	}
	if len(holders) > 0 && !core.SurelyFits(free, reserved, demand) && !core.GroupFits(free, reserved, demand) {
		p.yieldTo(ctx, m.Job, free, reserved, holders)
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf(
			"job %s yields to jobs ahead of it in the queue (older, or of higher priority) whose minimum groups need the free room", m.Job)), yielding
	}
	return nil, nil, refused{}
}

// extraLeavesRoom refuses an extra pod that would take room a group at the
// barrier (of another job) still needs, or that a starved job ahead waits
// for: a job's minimum comes before another job's extras, as in Coach's
// planner, or the group's last pod finds no node and the group is released.
// The extra is woken when that group is placed or released.
func (p *Plugin) extraLeavesRoom(ctx context.Context, job jobs.Key, pod *v1.Pod, waiting map[jobs.Key]core.Waiting) *fwk.Status {
	inFlight := p.inFlight(job, waiting)
	if len(inFlight) == 0 && !slices.ContainsFunc(p.registry.AheadUnplaced(job), p.starved) {
		return nil // the common case, on every extra: nothing to leave room for
	}
	free, err := p.freeCapacity()
	if err != nil {
		return fwk.AsStatus(err)
	}
	reserved, holders, starved := p.ahead(job, waiting, free, inFlight, true)
	if starved != nil {
		p.yieldTo(ctx, job, free, reserved, holders)
		return fwk.NewStatus(fwk.Unschedulable, p.starvedMessage(job, starved))
	}
	demand := []jobs.Request{jobs.RequestOf(pod)}
	if core.SurelyFits(free, reserved, demand) || core.GroupFits(free, reserved, demand) {
		return nil
	}
	p.yieldTo(ctx, job, free, reserved, holders)
	return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf(
		"job %s: an extra pod waits while another job's minimum group needs the room", job))
}

// ahead sets aside, after inFlight, the room the minimum groups of the jobs
// ahead of job need (onlyStarved: of those that waited past the starvation
// bound): reserved ends with one demand per job of holders, in queue order. A
// job ahead that waited past the bound and does not fit what is left is
// returned as starved: its room is held as it frees, so nothing behind it
// takes any. A job that could not fit the cluster even empty is never held for.
func (p *Plugin) ahead(job jobs.Key, waiting map[jobs.Key]core.Waiting, free []core.Free,
	inFlight [][]jobs.Request, onlyStarved bool) (reserved [][]jobs.Request, holders []jobs.Key, starved *jobs.JobView) {
	reserved = slices.Clip(inFlight)
	for _, before := range p.registry.AheadUnplaced(job) {
		if ok, _ := core.Admit(before); !ok || len(waiting[before.Key].Pods) > 0 || p.recentlyFailed(before.Key) || p.isBlocked(before.Key) {
			continue // cannot start now: it does not hold the jobs behind it back
		}
		need := core.Outstanding(before, core.Waiting{})
		long := p.starved(before)
		if long && !core.GroupFits(free, reserved, need) && p.couldFit(need) {
			return reserved, holders, &before
		}
		if long || !onlyStarved {
			reserved, holders = append(reserved, need), append(holders, before.Key)
		}
	}
	return reserved, holders, nil
}

// yieldTo records that job yields to the jobs ahead of it (holders, whose
// demands end reserved) and activates those of them whose groups fit the free
// room now: the pods of a job ahead may be waiting out a backoff of up to 10
// s, and while the jobs behind it yield, nothing else may use its room (on a
// stream of small jobs the nodes stood empty 7-8 s between pairs of jobs).
func (p *Plugin) yieldTo(ctx context.Context, job jobs.Key, free []core.Free, reserved [][]jobs.Request, holders []jobs.Key) {
	p.yield(job)
	first := len(reserved) - len(holders)
	set := slices.Clip(reserved[:first])
	var pods []*v1.Pod
	for i, k := range holders {
		if need := reserved[first+i]; core.GroupFits(free, set, need) {
			pods = append(pods, p.registry.Unbound(k)...)
			set = append(set, need)
		}
	}
	if len(pods) > 0 {
		go p.activate(klog.FromContext(ctx), pods, nil)
	}
}

// starved says whether a job has waited past the starvation bound.
func (p *Plugin) starved(v jobs.JobView) bool {
	return p.starvation > 0 && time.Since(v.Created) > p.starvation
}

// couldFit says whether a demand fits the empty cluster (if the nodes cannot
// be listed, it does not: nothing is held for it).
func (p *Plugin) couldFit(need []jobs.Request) bool {
	empty, err := p.capacity()
	return err == nil && core.GroupFits(empty, nil, need)
}

func (p *Plugin) starvedMessage(job jobs.Key, starved *jobs.JobView) string {
	return fmt.Sprintf("job %s waits: job %s ahead of it has waited %s for room, longer than %s, and the room "+
		"is held for it", job, starved.Key, time.Since(starved.Created).Round(time.Second), p.starvation)
}

// inFlight is what the other jobs' groups at the barrier still need, one
// demand per group that needs more.
func (p *Plugin) inFlight(job jobs.Key, waiting map[jobs.Key]core.Waiting) [][]jobs.Request {
	var out [][]jobs.Request
	for other, w := range waiting {
		if ov, ok := p.registry.View(other); ok && other != job {
			if d := core.Outstanding(ov, w); len(d) > 0 {
				out = append(out, d)
			}
		}
	}
	return out
}

// PreFilterExtensions is not needed: the check is per job, not per node.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// PostFilter runs when a pod of a job found no node: the job's pods waiting
// at the barrier are released at once rather than at the timeout, and if the
// filters (not PreFilter) refused it, they wait for it (see blocked). Jobs
// that yielded are woken when that freed room, never the pod's own job.
func (p *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	m, ok := jobs.MemberOf(pod)
	if !ok {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	byPreFilter, why := false, refused{}
	if state != nil {
		if data, err := state.Read(refusedKey); err == nil {
			byPreFilter, why = true, data.(refused)
			if why.onlyThisPod {
				return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("job %s: this pod waits; its group is left as it is", m.Job))
			}
		}
	}
	if !byPreFilter {
		p.block(m.Job, pod)
	}
	// A group failed for want of room keeps its place: the jobs that yielded
	// to it get another look, since it no longer holds room now. Any other
	// failure (the filters, the barrier) is marked, and for a timeout the job
	// holds no room for younger ones.
	newly := !why.forRoom && p.markFailed(m.Job)
	released := p.release(ctx, m.Job, "a pod of the group found no node") > 0
	if released || !byPreFilter || newly || (why.forRoom && !why.yields) {
		p.wakeYielded(klog.FromContext(ctx), m.Job, released)
	}
	return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("job %s: released its waiting pods", m.Job))
}

// Reserve does nothing; Unreserve is where a group is released.
func (p *Plugin) Reserve(context.Context, fwk.CycleState, *v1.Pod, string) *fwk.Status { return nil }

// Unreserve runs when a pod of a job is rejected at the barrier (timeout or
// release) or fails to bind: the whole group goes, so no partial minimum
// group keeps its nodes.
func (p *Plugin) Unreserve(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) {
	m, ok := jobs.MemberOf(pod)
	if !ok {
		return
	}
	p.leftBarrier(pod.UID)
	p.registry.Unpermit(pod)
	p.markFailed(m.Job)
	p.release(ctx, m.Job, fmt.Sprintf("pod %s was unreserved", pod.Name))
	p.wakeYielded(klog.FromContext(ctx), jobs.Key{}, true) // the group's nodes are free again
}

// Permit is the all-or-nothing barrier for the job's minimum group.
func (p *Plugin) Permit(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, nodeName string) (*fwk.Status, time.Duration) {
	m, ok := jobs.MemberOf(pod)
	if !ok {
		return nil, 0
	}
	if p.unblock(m.Job, pod) { // it passed the filters: its siblings may come back
		go p.activate(klog.FromContext(ctx), p.registry.Unbound(m.Job), pod)
	}
	v, _ := p.registry.View(m.Job)
	var siblings []fwk.WaitingPod
	roles := map[jobs.Role]bool{m.Role: true} // held by this pod, the placed ones and the waiting ones
	for r := range v.PlacedRoles {
		roles[r] = true
	}
	leaving := ""
	p.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if o, ok := jobs.MemberOf(wp.GetPod()); ok && o.Job == m.Job && wp.GetPod().UID != pod.UID {
			siblings = append(siblings, wp)
			roles[o.Role] = true
			if p.isLeaving(wp.GetPod().UID) {
				leaving = wp.GetPod().Name
			}
		}
	})
	if leaving != "" { // its Unreserve releases the rest of the group; this pod goes with it
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf(
			"job %s: pod %s of its group was rejected at the barrier; the group is released", m.Job, leaving)), 0
	}
	d := core.Permit(v.Placed(), len(siblings), v.MinGroup, len(roles) == len(jobs.AllRoles))
	logger := klog.FromContext(ctx)
	switch d {
	case core.AllowExtra:
		p.registry.MarkPermitted(pod)
		return nil, 0
	case core.AllowGroup:
		p.registry.MarkPermitted(pod)
		for _, wp := range siblings {
			p.registry.MarkPermitted(wp.GetPod())
			wp.Allow(Name)
			p.leftBarrier(wp.GetPod().UID)
		}
		p.wakeYielded(logger, jobs.Key{}, false) // its own pods that waited for the group are extras now
		logger.V(2).Info("Minimum group complete", "job", m.Job.String(), "pods", len(siblings)+1+v.Placed())
		return nil, 0
	default:
		logger.V(4).Info("Waiting for the rest of the group", "pod", klog.KObj(pod), "node", nodeName,
			"job", m.Job.String(), "placed", v.Placed(), "waiting", len(siblings)+1, "minGroup", v.MinGroup)
		p.mu.Lock()
		p.forgetOld()
		p.waitingSince[pod.UID] = time.Now() // the framework's timer starts after this
		p.mu.Unlock()
		return fwk.NewStatus(fwk.Wait, ""), p.timeout
	}
}

// release rejects every pod of job waiting at the barrier; it returns how many.
func (p *Plugin) release(ctx context.Context, job jobs.Key, why string) int {
	n := 0
	p.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if o, ok := jobs.MemberOf(wp.GetPod()); ok && o.Job == job {
			p.mu.Lock()
			p.rejected[wp.GetPod().UID] = time.Now()
			p.mu.Unlock()
			wp.Reject(Name, "gang released: "+why)
			n++
		}
	})
	if n > 0 {
		klog.FromContext(ctx).V(2).Info("Released waiting group", "job", job.String(), "pods", n, "reason", why)
	}
	return n
}

// isLeaving says whether a pod listed at the barrier was rejected: by this
// plugin, or by the framework's timer (its wait is over).
func (p *Plugin) isLeaving(uid types.UID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.rejected[uid]; ok {
		return true
	}
	since, ok := p.waitingSince[uid]
	return ok && time.Since(since) >= p.timeout
}

// forgetOld drops entries of pods whose wait ended long ago without an
// Unreserve or an Allow by this plugin (rejected just as it was allowed); p.mu
// is held.
func (p *Plugin) forgetOld() {
	for _, m := range []map[types.UID]time.Time{p.rejected, p.waitingSince} {
		for uid, t := range m {
			if time.Since(t) > p.timeout+time.Minute {
				delete(m, uid)
			}
		}
	}
}

// leftBarrier forgets a pod that was allowed or unreserved.
func (p *Plugin) leftBarrier(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.rejected, uid)
	delete(p.waitingSince, uid)
}

// block records that pod, of a job whose minimum group is not placed, found
// no node. Entries of jobs that are gone are dropped here, so the map stays
// small.
func (p *Plugin) block(job jobs.Key, pod *v1.Pod) {
	v, ok := p.registry.View(job)
	m, _ := jobs.MemberOf(pod)
	if !ok || v.Placed() >= v.MinGroup {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.blocked {
		if _, ok := p.registry.View(k); !ok {
			delete(p.blocked, k)
		}
	}
	if p.blocked[job] == nil {
		p.blocked[job] = map[types.UID]jobs.Role{}
	}
	p.blocked[job][pod.UID] = m.Role
}

// blockedBy names a pod that keeps pod's group out of the barrier, or "":
// pod itself may always try again, and the group waits only while it cannot
// be made without the pods that found no node (an extra worker that found
// no node holds nothing back).
func (p *Plugin) blockedBy(job jobs.Key, pod *v1.Pod) string {
	p.mu.Lock()
	_, own := p.blocked[job][pod.UID]
	p.mu.Unlock()
	if own {
		return ""
	}
	return p.blocker(job)
}

// blocker names a pod without which job's minimum group cannot be made, or
// "". Pods that are bound or gone are forgotten here.
func (p *Plugin) blocker(job jobs.Key) string {
	pending := map[types.UID]string{}
	for _, q := range p.registry.Unbound(job) {
		pending[q.UID] = q.Name
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	without := map[jobs.Role]int{}
	var names []string
	for uid, role := range p.blocked[job] {
		if name, ok := pending[uid]; ok {
			without[role]++
			names = append(names, name)
		} else {
			delete(p.blocked[job], uid)
		}
	}
	if len(p.blocked[job]) == 0 {
		delete(p.blocked, job)
		return ""
	}
	if v, ok := p.registry.View(job); !ok || core.Completable(v, without) {
		return ""
	}
	sort.Strings(names)
	return names[0]
}

func (p *Plugin) isBlocked(job jobs.Key) bool { return p.blocker(job) != "" }

// unblock forgets pod, which passed the filters; true if its group could not
// be made before and can now (its siblings were held back and may come).
func (p *Plugin) unblock(job jobs.Key, pod *v1.Pod) bool {
	p.mu.Lock()
	_, ok := p.blocked[job][pod.UID]
	p.mu.Unlock()
	if !ok {
		return false
	}
	was := p.blocker(job) != ""
	p.mu.Lock()
	delete(p.blocked[job], pod.UID)
	p.mu.Unlock()
	return was && p.blocker(job) == ""
}

// markFailed records that job's group failed now; true if it had not failed
// within the timeout.
func (p *Plugin) markFailed(job jobs.Key) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for k, t := range p.failed { // forget old entries: the map stays small
		if now.Sub(t) > p.timeout {
			delete(p.failed, k)
		}
	}
	_, before := p.failed[job]
	p.failed[job] = now
	return !before
}

func (p *Plugin) recentlyFailed(job jobs.Key) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.failed[job]
	return ok && time.Since(t) <= p.timeout
}

// waitingByJob lists the pods waiting at the barrier, by job.
func (p *Plugin) waitingByJob() map[jobs.Key]core.Waiting {
	out := map[jobs.Key]core.Waiting{}
	p.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if o, ok := jobs.MemberOf(wp.GetPod()); ok {
			w, seen := out[o.Job]
			if !seen {
				w = core.Waiting{Roles: map[jobs.Role]int{}, Pods: map[types.UID]bool{}}
				out[o.Job] = w
			}
			w.Roles[o.Role]++
			w.Pods[wp.GetPod().UID] = true
		}
	})
	return out
}

// freeCapacity is the room left on each schedulable node.
func (p *Plugin) freeCapacity() ([]core.Free, error) { return p.room(true) }

// capacity is the schedulable nodes' room when empty.
func (p *Plugin) capacity() ([]core.Free, error) { return p.room(false) }

func (p *Plugin) room(lessRequested bool) ([]core.Free, error) {
	nodes, err := p.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	out := make([]core.Free, 0, len(nodes))
	for _, ni := range nodes {
		if n := ni.Node(); n == nil || n.Spec.Unschedulable {
			continue
		}
		alloc := ni.GetAllocatable()
		f := core.Free{MilliCPU: alloc.GetMilliCPU(), Memory: alloc.GetMemory(), Pods: alloc.GetAllowedPodNumber()}
		if lessRequested {
			req := ni.GetRequested()
			f.MilliCPU, f.Memory, f.Pods = f.MilliCPU-req.GetMilliCPU(), f.Memory-req.GetMemory(), f.Pods-len(ni.GetPods())
		}
		out = append(out, f)
	}
	return out, nil
}
