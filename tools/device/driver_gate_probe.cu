/* tools/device/driver_gate_probe.cu: does one thread's cudaMalloc, capture
 * or instantiation wait while other threads replay CUDA graphs back to
 * back? The question behind tensor/cuda.cu's driver gate (NOTES v60): a
 * plain program, no prism, so a new driver can be checked in a minute.
 *
 *   nvcc -O2 -arch=sm_90 -o /tmp/gate_probe tools/device/driver_gate_probe.cu
 *   /tmp/gate_probe WORKERS SECONDS [NODES] [COPIES] [GATE]
 *
 * WORKERS threads each replay a graph of NODES tiny kernels (default 400,
 * about a probe model's training step) on a stream of their own, and with
 * COPIES 1 (the default) stage 4 KB in and read 8 bytes back through
 * pageable memory around every replay, as the trainer does. Meanwhile the
 * main thread, every 20 ms for SECONDS, times a cudaMalloc of 2 MiB, the
 * capture of a 2000-node graph and its instantiation. GATE 1 puts a gate
 * like tensor/cuda.cu's in front (replays pass together, the main thread's
 * calls go first). The workers stop SECONDS + 30 s after the start whatever
 * the main thread is doing, so a call that never gets through is reported
 * as such rather than hanging the program. */
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#define CHECK(x) check((x), #x, __LINE__)
static void check(cudaError_t e, const char *what, int line)
{
    if (e == cudaSuccess) return;
    fprintf(stderr, "line %d: %s: %s\n", line, what, cudaGetErrorString(e));
    exit(1);
}

__global__ void bump(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 0.999f + 1.0f;
}

static double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

static std::atomic<bool> stop{false};
static int nodes = 400, copies = 1, use_gate = 0;

/* replays pass together; a context call waits for them to leave and goes first */
static struct {
    std::mutex mu;
    std::condition_variable cv;
    int replaying = 0, waiting = 0;
    bool held = false;
} gate;
static void replay_enter()
{
    std::unique_lock<std::mutex> l(gate.mu);
    gate.cv.wait(l, [] { return gate.waiting == 0 && !gate.held; });
    gate.replaying++;
}
static void replay_leave()
{
    std::lock_guard<std::mutex> l(gate.mu);
    if (--gate.replaying == 0 && gate.waiting) gate.cv.notify_all();
}
static void hold()
{
    std::unique_lock<std::mutex> l(gate.mu);
    gate.waiting++;
    gate.cv.wait(l, [] { return gate.replaying == 0 && !gate.held; });
    gate.waiting--;
    gate.held = true;
}
static void release()
{
    std::lock_guard<std::mutex> l(gate.mu);
    gate.held = false;
    gate.cv.notify_all();
}

/* a graph of n launches of bump on x; capture and instantiation seconds into *cap, *inst */
static cudaGraphExec_t make_graph(float *x, int n, double *cap, double *inst)
{
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    double t0 = now_s();
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    for (int i = 0; i < n; i++) bump<<<4, 256, 0, s>>>(x, 1024);
    cudaGraph_t g;
    CHECK(cudaStreamEndCapture(s, &g));
    double t1 = now_s();
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    if (cap) *cap = t1 - t0, *inst = now_s() - t1;
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(s));
    return e;
}

static void worker(long *steps)
{
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *x;
    CHECK(cudaMalloc(&x, 4096 * sizeof(float)));
    CHECK(cudaMemset(x, 0, 4096 * sizeof(float)));
    cudaGraphExec_t e = make_graph(x, nodes, NULL, NULL);
    std::vector<int> batch(1024, 1);
    float loss[2];
    long n = 0;
    while (!stop) {
        if (copies) CHECK(cudaMemcpyAsync(x + 2048, batch.data(), 4096, cudaMemcpyHostToDevice, s));
        if (use_gate) replay_enter();
        CHECK(cudaGraphLaunch(e, s));
        if (use_gate) replay_leave();
        if (copies) CHECK(cudaMemcpyAsync(loss, x, sizeof loss, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        n++;
    }
    *steps = n;
}

static void report(const char *what, std::vector<double> v)
{
    if (v.empty()) {
        printf("  %-12s none got through\n", what);
        return;
    }
    std::sort(v.begin(), v.end());
    printf("  %-12s ms: median %.2f, p90 %.2f, max %.1f (%zu calls)\n", what, 1e3 * v[v.size() / 2],
           1e3 * v[v.size() * 9 / 10], 1e3 * v.back(), v.size());
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s WORKERS SECONDS [NODES] [COPIES] [GATE]\n", argv[0]);
        return 2;
    }
    const int nw = atoi(argv[1]);
    const double secs = atof(argv[2]);
    if (argc > 3) nodes = atoi(argv[3]);
    if (argc > 4) copies = atoi(argv[4]);
    if (argc > 5) use_gate = atoi(argv[5]);
    CHECK(cudaFree(0));
    float *y;
    CHECK(cudaMalloc(&y, 4096 * sizeof(float)));
    cudaGraphExecDestroy(make_graph(y, 2000, NULL, NULL));   /* the kernel loaded before anyone waits */
    std::vector<long> steps(nw);
    std::vector<std::thread> workers;
    for (int i = 0; i < nw; i++) workers.emplace_back(worker, &steps[i]);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));   /* replaying */
    const double t_start = now_s(), t_end = t_start + secs;
    std::thread watchdog([&] {
        while (!stop && now_s() < t_end + 30) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        stop = true;
    });
    std::vector<double> mallocs, caps, insts;
    while (now_s() < t_end && !stop) {
        if (use_gate) hold();
        void *p;
        double t = now_s();
        CHECK(cudaMalloc(&p, 2 << 20));
        mallocs.push_back(now_s() - t);
        double cap, inst;
        CHECK(cudaGraphExecDestroy(make_graph(y, 2000, &cap, &inst)));
        caps.push_back(cap), insts.push_back(inst);
        if (use_gate) release();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const bool timed_out = stop;
    const double took = now_s() - t_start;
    stop = true;
    for (auto &w : workers) w.join();
    watchdog.join();
    long total = 0;
    for (long s : steps) total += s;
    printf("%d workers, %d-node graphs, copies %d, gate %d: %.0f replays/s over %.1f s%s\n", nw, nodes, copies, use_gate,
           total / took, took, timed_out ? " (the main thread's call was still waiting when the workers were stopped)" : "");
    report("cudaMalloc", mallocs);
    report("capture", caps);
    report("instantiate", insts);
    return 0;
}
