package jobs

import (
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// Request is what one pod asks of a node: the three resources the gang
// admission check packs (CPU, memory, one pod slot).
type Request struct {
	MilliCPU int64
	Memory   int64
}

// RequestOf sums a pod's container requests the way the scheduler does.
func RequestOf(pod *v1.Pod) Request {
	rl := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	return Request{MilliCPU: rl.Cpu().MilliValue(), Memory: rl.Memory().Value()}
}

type podRecord struct {
	pod      *v1.Pod // the latest version seen
	name     string
	role     Role
	minGroup int
	badMin   string // "pod NAME: why its min-group annotation cannot be read" ("" if it can)
	nodeName string
	request  Request
	priority int32
}

type jobRecord struct {
	created   time.Time // earliest creationTimestamp seen; sticky for the job's life
	seq       uint64    // order in which the informer first saw the job
	pods      map[types.UID]*podRecord
	permitted map[types.UID]struct{} // passed Permit, binding not yet observed
	gatedWhy  string                 // why PreEnqueue last kept a pod out of the queue ("" if not)
}

// OrderKey places a pod in the job-FIFO queue (thesis Algorithm 1): the job
// that asked first goes first; a job's pods stay together, ordered by name.
type OrderKey struct {
	Created time.Time
	Seq     uint64
	Job     string
	Pod     string
}

// Less is a strict weak order over OrderKeys.
func (a OrderKey) Less(b OrderKey) bool {
	if !a.Created.Equal(b.Created) {
		return a.Created.Before(b.Created)
	}
	if a.Seq != b.Seq {
		return a.Seq < b.Seq
	}
	if a.Job != b.Job {
		return a.Job < b.Job
	}
	return a.Pod < b.Pod
}

// JobView is a consistent copy of one job's state.
type JobView struct {
	Key Key
	// Created is when the job's first pod was created: how long it has waited.
	Created time.Time
	// MinGroup is the largest minimum group its live pods ask for: the
	// backend sets one value per job, and if pods disagree the answer must
	// not depend on which pod was seen last.
	MinGroup int
	// BadMinGroup names a live pod whose min-group annotation cannot be
	// read, and why ("" if there is none): the job is held back until it is
	// fixed (the smallest such message, whichever pod was seen last).
	BadMinGroup string
	Roles       map[Role]int
	Pods        int // live pods (not terminating, not finished)
	Bound       int // live pods with a node
	// Permitted counts pods that passed Permit and are being bound.
	Permitted int
	// PlacedRoles counts the bound and permitted pods by role.
	PlacedRoles map[Role]int
	// Unplaced holds the live pods that are neither bound nor permitted,
	// smallest request first.
	Unplaced []Pending
}

// Pending is an unplaced pod: its role and what it asks of a node.
type Pending struct {
	UID  types.UID
	Role Role
	Request
}

// Placed is the number of pods that are bound or on their way to be bound.
func (v JobView) Placed() int { return v.Bound + v.Permitted }

// MissingRoles lists the roles the job has no live pod of.
func (v JobView) MissingRoles() []Role {
	var out []Role
	for _, r := range AllRoles {
		if v.Roles[r] == 0 {
			out = append(out, r)
		}
	}
	return out
}

// Registry tracks the live pods of every Coach job. It is fed by the pod
// informer (Observe/Forget), read by all plugins, and safe for concurrent use:
// the scheduling cycle, binding goroutines and informer callbacks all call it.
// A job is forgotten as soon as its last pod is gone, so the maps never grow
// beyond the jobs that exist.
type Registry struct {
	mu   sync.RWMutex
	seq  uint64
	jobs map[Key]*jobRecord
	// byUID names the job each tracked pod is recorded under, so a pod whose
	// labels changed (another job, an unknown role, none) is forgotten there.
	byUID map[types.UID]Key
	// gone remembers for a while the tracked pods that were deleted or
	// ended: the queue and the plugins observe their own copies of pods, and
	// a stale copy must not bring a pod back that is gone for good.
	gone     map[types.UID]time.Time
	prunedAt time.Time
}

// goneFor is how long a deleted pod's UID is remembered: far longer than a
// stale copy of it can circulate in the scheduler.
const goneFor = 10 * time.Minute

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{jobs: map[Key]*jobRecord{}, byUID: map[types.UID]Key{}, gone: map[types.UID]time.Time{}}
}

func live(pod *v1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed
}

// Observe records a pod that was added or updated. Pods that are not members
// of a Coach job of this scheduler are ignored (a pod placed by another
// scheduler is none of the gang's business: a pending one would hold younger
// jobs back for good); terminating or finished pods, and pods that stopped
// being members, are forgotten.
func (r *Registry) Observe(pod *v1.Pod) {
	m, ok := ours(pod)
	if !ok {
		r.Forget(pod) // if its labels changed; other pods cost a read lock
		return
	}
	if !live(pod) {
		r.Delete(pod)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.gone[pod.UID]; ok {
		return // a stale copy of a pod that is gone
	}
	if old, ok := r.byUID[pod.UID]; ok && old != m.Job {
		r.forgetLocked(old, pod.UID)
	}
	r.byUID[pod.UID] = m.Job
	j := r.jobs[m.Job]
	if j == nil {
		r.seq++
		j = &jobRecord{created: pod.CreationTimestamp.Time, seq: r.seq,
			pods: map[types.UID]*podRecord{}, permitted: map[types.UID]struct{}{}}
		r.jobs[m.Job] = j
	}
	// the job's key stays what it was when the job was first seen (even if an
	// older sibling shows up later): the queue's heap holds its pods by it
	rec := j.pods[pod.UID]
	if rec == nil {
		rec = &podRecord{name: pod.Name, request: RequestOf(pod)}
		j.pods[pod.UID] = rec
	} else if rec.nodeName != "" && pod.Spec.NodeName == "" {
		return // a copy from before its binding (a bound pod's node never changes): stale
	}
	rec.pod = pod
	rec.role = m.Role
	rec.minGroup = m.MinGroup
	rec.badMin = ""
	if m.BadMinGroup != "" {
		rec.badMin = "pod " + pod.Name + ": " + m.BadMinGroup
	}
	rec.nodeName = pod.Spec.NodeName
	rec.priority = corev1helpers.PodPriority(pod)
	if rec.nodeName != "" {
		delete(j.permitted, pod.UID)
	}
}

// Delete drops a pod that is gone for good (deleted, terminating or finished)
// and, if it was a Coach pod of this scheduler, remembers it, so that a stale
// copy does not bring it back. Other pods cost a read lock.
func (r *Registry) Delete(pod *v1.Pod) {
	if _, ok := ours(pod); !ok && !r.tracked(pod) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if now.Sub(r.prunedAt) > time.Minute { // the map holds only the last minutes' pods
		for uid, t := range r.gone {
			if now.Sub(t) > goneFor {
				delete(r.gone, uid)
			}
		}
		r.prunedAt = now
	}
	r.gone[pod.UID] = now
	if key, ok := r.byUID[pod.UID]; ok {
		r.forgetLocked(key, pod.UID)
	}
}

// Forget drops a pod that is no longer tracked (its labels changed), and its
// job once no pod is left.
func (r *Registry) Forget(pod *v1.Pod) {
	if !r.tracked(pod) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if key, ok := r.byUID[pod.UID]; ok {
		r.forgetLocked(key, pod.UID)
	}
}

// ours is MemberOf for the pods this scheduler places.
func ours(pod *v1.Pod) (Member, bool) {
	m, ok := MemberOf(pod)
	return m, ok && pod.Spec.SchedulerName == SchedulerName
}

func (r *Registry) tracked(pod *v1.Pod) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.byUID[pod.UID]
	return ok
}

func (r *Registry) forgetLocked(key Key, uid types.UID) {
	delete(r.byUID, uid)
	if j := r.jobs[key]; j != nil {
		delete(j.pods, uid)
		delete(j.permitted, uid)
		if len(j.pods) == 0 {
			delete(r.jobs, key)
		}
	}
}

// withJob runs fn under the write lock with the tracked job of a pod; it
// does nothing for a pod that is not tracked.
func (r *Registry) withJob(pod *v1.Pod, fn func(*jobRecord)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if key, ok := r.byUID[pod.UID]; ok {
		if j := r.jobs[key]; j != nil {
			fn(j)
		}
	}
}

// Order returns the queue position of a pod. A member pod the informer has
// not delivered yet is observed first, so its job's key is fixed from the
// first time the queue compares it.
func (r *Registry) Order(pod *v1.Pod) OrderKey {
	m, ok := MemberOf(pod)
	if !ok {
		return OrderKey{Created: pod.CreationTimestamp.Time, Job: "~" + pod.Namespace + "/" + pod.Name, Pod: pod.Name}
	}
	if k, ok := r.orderOf(m.Job, pod); ok {
		return k
	}
	r.Observe(pod)
	if k, ok := r.orderOf(m.Job, pod); ok {
		return k
	}
	// not tracked (terminating, or another scheduler's): its own time
	return OrderKey{Created: pod.CreationTimestamp.Time, Job: m.Job.String(), Pod: pod.Name}
}

func (r *Registry) orderOf(job Key, pod *v1.Pod) (OrderKey, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	j := r.jobs[job]
	if j == nil {
		return OrderKey{}, false
	}
	return OrderKey{Created: j.created, Seq: j.seq, Job: job.String(), Pod: pod.Name}, true
}

// View returns a copy of a job's state; ok is false if the job has no live pod.
func (r *Registry) View(key Key) (JobView, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	j := r.jobs[key]
	if j == nil {
		return JobView{Key: key, Roles: map[Role]int{}}, false
	}
	v := JobView{Key: key, Created: j.created, Roles: map[Role]int{}, PlacedRoles: map[Role]int{}, Pods: len(j.pods)}
	for uid, p := range j.pods {
		v.Roles[p.role]++
		v.MinGroup = max(v.MinGroup, p.minGroup)
		if p.badMin != "" && (v.BadMinGroup == "" || p.badMin < v.BadMinGroup) {
			v.BadMinGroup = p.badMin
		}
		switch _, permitted := j.permitted[uid]; {
		case p.nodeName != "":
			v.Bound++
			v.PlacedRoles[p.role]++
		case permitted:
			v.Permitted++
			v.PlacedRoles[p.role]++
		default:
			v.Unplaced = append(v.Unplaced, Pending{UID: uid, Role: p.role, Request: p.request})
		}
	}
	sortPending(v.Unplaced)
	return v, true
}

// AheadUnplaced returns the jobs ahead of key's job in the queue that have not
// placed their minimum group yet, first in the queue first: jobs of a higher
// priority, and of the same priority those that arrived before it (the queue
// sort's order, job by job).
func (r *Registry) AheadUnplaced(key Key) []JobView {
	r.mu.RLock()
	me := r.jobs[key]
	var keys []Key
	if me != nil {
		for k, j := range r.jobs {
			if k != key && len(j.pods)-countBound(j) > 0 && ahead(j, me) {
				keys = append(keys, k)
			}
		}
	}
	sort.Slice(keys, func(a, b int) bool { return ahead(r.jobs[keys[a]], r.jobs[keys[b]]) })
	r.mu.RUnlock()
	var out []JobView
	for _, k := range keys {
		if v, ok := r.View(k); ok && v.Placed() < v.MinGroup {
			out = append(out, v)
		}
	}
	return out
}

// ahead says whether job a comes before job b in the queue.
func ahead(a, b *jobRecord) bool {
	if pa, pb := priority(a), priority(b); pa != pb {
		return pa > pb
	}
	return OrderKey{Created: a.created, Seq: a.seq}.Less(OrderKey{Created: b.created, Seq: b.seq})
}

// priority is the lowest priority among a job's unbound pods (they are meant
// to share one): the queue sorts each pod by its own, and a group starts when
// its last pod comes. Only jobs with unbound pods are compared.
func priority(j *jobRecord) int32 {
	var out int32
	found := false
	for _, p := range j.pods {
		if p.nodeName == "" && (!found || p.priority < out) {
			out, found = p.priority, true
		}
	}
	return out
}

func countBound(j *jobRecord) int {
	n := len(j.permitted)
	for _, p := range j.pods {
		if p.nodeName != "" {
			n++
		}
	}
	return n
}

// MarkGated records that PreEnqueue kept a pod of the job out of the queue,
// and why; true if the reason is new (the first, or it changed as pods came).
func (r *Registry) MarkGated(key Key, why string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	j := r.jobs[key]
	if j == nil || j.gatedWhy == why {
		return false
	}
	j.gatedWhy = why
	return true
}

// TakeGated returns the job's unbound pods if one of them was gated, and
// clears the mark: the caller wakes them once.
func (r *Registry) TakeGated(key Key) []*v1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	j := r.jobs[key]
	if j == nil || j.gatedWhy == "" {
		return nil
	}
	j.gatedWhy = ""
	return unbound(j)
}

// Unbound returns the job's pods that have no node.
func (r *Registry) Unbound(key Key) []*v1.Pod {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if j := r.jobs[key]; j != nil {
		return unbound(j)
	}
	return nil
}

func unbound(j *jobRecord) []*v1.Pod {
	var out []*v1.Pod
	for _, p := range j.pods {
		if p.nodeName == "" && p.pod != nil {
			out = append(out, p.pod)
		}
	}
	return out
}

// Jobs returns the number of jobs tracked (for tests: the registry shrinks).
func (r *Registry) Jobs() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.jobs)
}

// MarkPermitted records that a pod passed the Permit barrier and is being
// bound, so later pods of the job count it as placed.
func (r *Registry) MarkPermitted(pod *v1.Pod) {
	r.withJob(pod, func(j *jobRecord) {
		if rec := j.pods[pod.UID]; rec != nil && rec.nodeName == "" {
			j.permitted[pod.UID] = struct{}{}
		}
	})
}

// Unpermit undoes MarkPermitted, when binding fails or a pod is rejected.
func (r *Registry) Unpermit(pod *v1.Pod) {
	r.withJob(pod, func(j *jobRecord) { delete(j.permitted, pod.UID) })
}

// EventHandler feeds the registry from a pod informer.
func (r *Registry) EventHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if pod, ok := obj.(*v1.Pod); ok {
				r.Observe(pod)
			}
		},
		UpdateFunc: func(_, obj interface{}) {
			if pod, ok := obj.(*v1.Pod); ok {
				r.Observe(pod)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				r.Delete(pod)
			}
		},
	}
}

func sortPending(ps []Pending) {
	sort.Slice(ps, func(a, b int) bool {
		if ps[a].MilliCPU != ps[b].MilliCPU {
			return ps[a].MilliCPU < ps[b].MilliCPU
		}
		return ps[a].Memory < ps[b].Memory
	})
}
