/*
 * nvmlsim: a simulated libnvidia-ml.so.1 for tests.
 *
 * It exports the real NVML symbol names with the real argument lists and
 * structure layouts that nvidia-ml-py 13.x (pynvml.py) calls through ctypes,
 * so the collector runs its real code path: pynvml's own structures, its
 * versioned function lookups (_v2/_v3) and its error classes.
 *
 * The machine it simulates is read from a scenario file whose path is in the
 * environment variable NVMLSIM_SCENARIO, at every nvmlInit (when the library
 * is not already initialised).  The file is written by
 * tests/support/nvmlsim/__init__.py; its format is documented there and in
 * tests/support/nvmlsim/README.md.  Time: every time in the scenario is in
 * seconds relative to the scenario's `epoch` (absolute unix seconds), so
 * several processes (capture children) see one shared timeline.
 *
 * Semantics worth knowing:
 *  - a numeric attribute that the scenario does not define makes its getter
 *    return NVML_ERROR_NOT_SUPPORTED;
 *  - a device with lost_at <= now answers NVML_ERROR_GPU_IS_LOST everywhere
 *    (its MIG devices too);
 *  - `inject` records make a named function (or its _vN variants) sleep
 *    and/or return a chosen error code during a time window.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define NVML_VALUE_NOT_AVAILABLE_ULL 0xFFFFFFFFFFFFFFFFULL
#define NO_INSTANCE 0xFFFFFFFFu
#define NVML_MEMORY_V2 0x02000028u

/* ---- public structure layouts (as in nvml.h / pynvml.py) ---- */
typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t; /* _v2 and _v3 share this layout */

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct {
    unsigned int gpuUtilization;
    unsigned int memoryUtilization;
    unsigned long long maxMemoryUsage;
    unsigned long long time;
    unsigned long long startTime;
    unsigned int isRunning;
    unsigned int reserved[5];
} nvmlAccountingStats_t;

struct simdev;
typedef struct simdev *nvmlDevice_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;   /* CPU time of the value, microseconds since 1970 */
    long long latencyUsec;
    int valueType;         /* nvmlValueType_t */
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

/* ---- simulation state ---- */
typedef struct {
    double t, v;
} point;

typedef struct {
    char name[48];
    int n, cap;
    point *p;
} series;

typedef struct simdev {
    int id;
    int index;  /* NVML index of a physical GPU, parent's index for MIG */
    int parent; /* -1 for a physical GPU */
    int slot;   /* MIG slot for nvmlDeviceGetMigDeviceHandleByIndex */
    unsigned int gi, ci;
    char uuid[96], name[96], serial[32], pci[32], vbios[32];
    double lost_at;
    int nattr;
    series attr[128];
} simdev;

typedef struct {
    int id;
    unsigned int pid;
    int dev;
    int type; /* 0 compute, 1 graphics, 2 MPS */
    double start, end;
    series used_memory, sm_util, mem_util, enc_util, dec_util;
} simproc;

typedef struct {
    int dev;
    double t;
    unsigned long long type, data;
} simevent;

typedef struct {
    int dev, cause;
    unsigned long long address, timestamp;
} simpage;

typedef struct {
    char func[96];
    int dev;
    int code;
    double sleep_s, from, to;
} siminject;

typedef struct {
    unsigned long long mask[256];
    double reg_time[256];
    char *delivered;
} simeventset;

static int g_refcount;
static double g_epoch;
static char g_driver[80] = "550.54.15", g_nvml[80] = "12.550.54.15";
static int g_cuda = 12040;
static double g_util_period = 1.0;
static int g_util_buffer = 20;
static simdev *g_dev;
static int g_ndev;
static simproc *g_proc;
static int g_nproc;
static simevent *g_ev;
static int g_nev;
static simpage *g_page;
static int g_npage;
static siminject *g_inj;
static int g_ninj;

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double now_rel(void) { return wall_now() - g_epoch; }

static void sleep_s(double s) {
    struct timespec ts;
    if (s <= 0) return;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static void *grow(void *p, int n, int *cap, size_t size) {
    if (n < *cap) return p;
    *cap = *cap ? *cap * 2 : 16;
    p = realloc(p, (size_t)*cap * size);
    if (!p) abort();
    return p;
}

static void series_add(series *s, double t, double v) {
    s->p = grow(s->p, s->n, &s->cap, sizeof(point));
    s->p[s->n].t = t;
    s->p[s->n].v = v;
    s->n++;
}

/* Step function: value of the last point with t <= at (points kept sorted); before the first
 * point, the first point's value.  An empty series has no value. */
static int series_at(const series *s, double at, double *out) {
    int i, found = 0;
    if (s->n > 0) {
        *out = s->p[0].v;
        found = 1;
    }
    for (i = 0; i < s->n; i++) {
        if (s->p[i].t <= at) {
            *out = s->p[i].v;
            found = 1;
        } else {
            break;
        }
    }
    return found;
}

static void series_sort(series *s) {
    int i, j;
    for (i = 1; i < s->n; i++) {
        point x = s->p[i];
        for (j = i - 1; j >= 0 && s->p[j].t > x.t; j--) s->p[j + 1] = s->p[j];
        s->p[j + 1] = x;
    }
}

static series *dev_attr(simdev *d, const char *name, int create) {
    int i;
    for (i = 0; i < d->nattr; i++)
        if (strcmp(d->attr[i].name, name) == 0) return &d->attr[i];
    if (!create || d->nattr >= (int)(sizeof d->attr / sizeof d->attr[0])) return NULL;
    series *s = &d->attr[d->nattr++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

/* Current value of a device attribute; 0 when the scenario does not define it. */
static int dget(simdev *d, const char *name, double *out) {
    series *s = dev_attr(d, name, 0);
    if (!s) return 0;
    return series_at(s, now_rel(), out);
}

static unsigned long long u64(double v) { return v <= 0 ? 0ULL : (unsigned long long)llround(v); }

static void free_state(void) {
    int i, j;
    for (i = 0; i < g_ndev; i++)
        for (j = 0; j < g_dev[i].nattr; j++) free(g_dev[i].attr[j].p);
    for (i = 0; i < g_nproc; i++) {
        free(g_proc[i].used_memory.p);
        free(g_proc[i].sm_util.p);
        free(g_proc[i].mem_util.p);
        free(g_proc[i].enc_util.p);
        free(g_proc[i].dec_util.p);
    }
    free(g_dev);
    free(g_proc);
    free(g_ev);
    free(g_page);
    free(g_inj);
    g_dev = NULL;
    g_proc = NULL;
    g_ev = NULL;
    g_page = NULL;
    g_inj = NULL;
    g_ndev = g_nproc = g_nev = g_npage = g_ninj = 0;
}

/* ---- scenario parsing ---- */
#define MAXF 32
typedef struct {
    int n;
    char *k[MAXF], *v[MAXF];
} fields;

static const char *fget(const fields *f, const char *key) {
    int i;
    for (i = 0; i < f->n; i++)
        if (strcmp(f->k[i], key) == 0) return f->v[i];
    return NULL;
}

static double fnum(const fields *f, const char *key, double dflt) {
    const char *s = fget(f, key);
    return s ? strtod(s, NULL) : dflt;
}

static void fstr(const fields *f, const char *key, char *dst, size_t n) {
    const char *s = fget(f, key);
    snprintf(dst, n, "%s", s ? s : "");
}

static simdev *dev_by_id(int id) { return (id >= 0 && id < g_ndev) ? &g_dev[id] : NULL; }

static int load_scenario(void) {
    const char *path = getenv("NVMLSIM_SCENARIO");
    char line[8192];
    int lineno = 0, capd = 0, capp = 0, cape = 0, capg = 0, capi = 0;
    FILE *fp;
    if (!path || !*path) {
        fprintf(stderr, "nvmlsim: NVMLSIM_SCENARIO is not set\n");
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    fp = fopen(path, "r");
    if (!fp) {
        fprintf(stderr, "nvmlsim: cannot open scenario %s\n", path);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    free_state();
    g_epoch = wall_now();
    while (fgets(line, sizeof line, fp)) {
        fields f;
        char *save = NULL, *tok, *rec;
        lineno++;
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        rec = strtok_r(line, "\t", &save);
        f.n = 0;
        while ((tok = strtok_r(NULL, "\t", &save)) && f.n < MAXF) {
            char *eq = strchr(tok, '=');
            if (!eq) continue;
            *eq = 0;
            f.k[f.n] = tok;
            f.v[f.n] = eq + 1;
            f.n++;
        }
        if (strcmp(rec, "nvmlsim") == 0) {
            continue;
        } else if (strcmp(rec, "system") == 0) {
            g_epoch = fnum(&f, "epoch", g_epoch);
            if (fget(&f, "driver")) fstr(&f, "driver", g_driver, sizeof g_driver);
            if (fget(&f, "nvml")) fstr(&f, "nvml", g_nvml, sizeof g_nvml);
            g_cuda = (int)fnum(&f, "cuda", g_cuda);
            g_util_period = fnum(&f, "util_period", g_util_period);
            g_util_buffer = (int)fnum(&f, "util_buffer", g_util_buffer);
        } else if (strcmp(rec, "device") == 0) {
            simdev *d;
            int id = (int)fnum(&f, "id", -1);
            if (id != g_ndev) goto bad;
            g_dev = grow(g_dev, g_ndev, &capd, sizeof(simdev));
            d = &g_dev[g_ndev++];
            memset(d, 0, sizeof *d);
            d->id = id;
            d->index = (int)fnum(&f, "index", 0);
            d->parent = (int)fnum(&f, "parent", -1);
            d->slot = (int)fnum(&f, "slot", 0);
            d->gi = (unsigned int)fnum(&f, "gi", NO_INSTANCE);
            d->ci = (unsigned int)fnum(&f, "ci", NO_INSTANCE);
            d->lost_at = fnum(&f, "lost_at", INFINITY);
            fstr(&f, "uuid", d->uuid, sizeof d->uuid);
            fstr(&f, "name", d->name, sizeof d->name);
            fstr(&f, "serial", d->serial, sizeof d->serial);
            fstr(&f, "pci", d->pci, sizeof d->pci);
            fstr(&f, "vbios", d->vbios, sizeof d->vbios);
            if (d->parent >= 0 && !dev_by_id(d->parent)) goto bad;
        } else if (strcmp(rec, "attr") == 0) {
            simdev *d = dev_by_id((int)fnum(&f, "dev", -1));
            const char *name = fget(&f, "name");
            series *s;
            if (!d || !name) goto bad;
            s = dev_attr(d, name, 1);
            if (!s) goto bad;
            series_add(s, fnum(&f, "t", -INFINITY), fnum(&f, "v", 0));
        } else if (strcmp(rec, "proc") == 0) {
            simproc *p;
            int id = (int)fnum(&f, "id", -1);
            if (id != g_nproc || !dev_by_id((int)fnum(&f, "dev", -1))) goto bad;
            g_proc = grow(g_proc, g_nproc, &capp, sizeof(simproc));
            p = &g_proc[g_nproc++];
            memset(p, 0, sizeof *p);
            p->id = id;
            p->pid = (unsigned int)fnum(&f, "pid", 0);
            p->dev = (int)fnum(&f, "dev", -1);
            p->type = (int)fnum(&f, "type", 0);
            p->start = fnum(&f, "start", -INFINITY);
            p->end = fnum(&f, "end", INFINITY);
        } else if (strcmp(rec, "pattr") == 0) {
            int id = (int)fnum(&f, "proc", -1);
            const char *name = fget(&f, "name");
            series *s = NULL;
            simproc *p;
            if (id < 0 || id >= g_nproc || !name) goto bad;
            p = &g_proc[id];
            if (strcmp(name, "used_memory") == 0) s = &p->used_memory;
            else if (strcmp(name, "sm_util") == 0) s = &p->sm_util;
            else if (strcmp(name, "mem_util") == 0) s = &p->mem_util;
            else if (strcmp(name, "enc_util") == 0) s = &p->enc_util;
            else if (strcmp(name, "dec_util") == 0) s = &p->dec_util;
            if (!s) goto bad;
            series_add(s, fnum(&f, "t", -INFINITY), fnum(&f, "v", 0));
        } else if (strcmp(rec, "event") == 0) {
            if (!dev_by_id((int)fnum(&f, "dev", -1))) goto bad;
            g_ev = grow(g_ev, g_nev, &cape, sizeof(simevent));
            g_ev[g_nev].dev = (int)fnum(&f, "dev", -1);
            g_ev[g_nev].t = fnum(&f, "t", 0);
            g_ev[g_nev].type = u64(fnum(&f, "type", 8));
            g_ev[g_nev].data = u64(fnum(&f, "data", 0));
            g_nev++;
        } else if (strcmp(rec, "retired") == 0) {
            if (!dev_by_id((int)fnum(&f, "dev", -1))) goto bad;
            g_page = grow(g_page, g_npage, &capg, sizeof(simpage));
            g_page[g_npage].dev = (int)fnum(&f, "dev", -1);
            g_page[g_npage].cause = (int)fnum(&f, "cause", 0);
            g_page[g_npage].address = strtoull(fget(&f, "address") ? fget(&f, "address") : "0", NULL, 0);
            g_page[g_npage].timestamp = strtoull(fget(&f, "timestamp") ? fget(&f, "timestamp") : "0", NULL, 0);
            g_npage++;
        } else if (strcmp(rec, "inject") == 0) {
            siminject *j;
            g_inj = grow(g_inj, g_ninj, &capi, sizeof(siminject));
            j = &g_inj[g_ninj++];
            fstr(&f, "func", j->func, sizeof j->func);
            j->dev = (int)fnum(&f, "dev", -1);
            j->code = (int)fnum(&f, "code", 0);
            j->sleep_s = fnum(&f, "sleep", 0);
            j->from = fnum(&f, "from", -INFINITY);
            j->to = fnum(&f, "to", INFINITY);
        } else {
            goto bad;
        }
        continue;
    bad:
        fprintf(stderr, "nvmlsim: %s:%d: bad record\n", path, lineno);
        fclose(fp);
        free_state();
        return NVML_ERROR_UNKNOWN;
    }
    fclose(fp);
    {
        int i, j;
        for (i = 0; i < g_ndev; i++)
            for (j = 0; j < g_dev[i].nattr; j++) series_sort(&g_dev[i].attr[j]);
        for (i = 0; i < g_nproc; i++) {
            series_sort(&g_proc[i].used_memory);
            series_sort(&g_proc[i].sm_util);
            series_sort(&g_proc[i].mem_util);
            series_sort(&g_proc[i].enc_util);
            series_sort(&g_proc[i].dec_util);
        }
    }
    return NVML_SUCCESS;
}

/* ---- call checks: initialisation, lost GPUs, injected errors and hangs ---- */
static int name_matches(const char *inj, const char *fn) {
    size_t n = strlen(inj);
    if (strcmp(inj, fn) == 0) return 1;
    return strncmp(inj, fn, n) == 0 && fn[n] == '_' && fn[n + 1] == 'v';
}

static int injected(const char *fn, int dev_id, int parent_id) {
    int i;
    double t = now_rel();
    for (i = 0; i < g_ninj; i++) {
        siminject *j = &g_inj[i];
        if (!name_matches(j->func, fn)) continue;
        if (j->dev >= 0 && j->dev != dev_id && j->dev != parent_id) continue;
        if (t < j->from || t >= j->to) continue;
        if (j->sleep_s > 0) sleep_s(j->sleep_s);
        if (j->code) return j->code;
    }
    return NVML_SUCCESS;
}

static simdev *root_of(simdev *d) { return d->parent >= 0 ? &g_dev[d->parent] : d; }

static int valid_handle(nvmlDevice_t d) { return d && g_dev && d >= g_dev && d < g_dev + g_ndev; }

static int check_dev(const char *fn, nvmlDevice_t d) {
    int rc;
    if (!g_refcount) return NVML_ERROR_UNINITIALIZED;
    if (!valid_handle(d)) return NVML_ERROR_INVALID_ARGUMENT;
    if (now_rel() >= root_of(d)->lost_at) return NVML_ERROR_GPU_IS_LOST;
    rc = injected(fn, d->id, d->parent);
    if (rc) return rc;
    /* a hang may have outlasted the GPU */
    return now_rel() >= root_of(d)->lost_at ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

static int check_sys(const char *fn) {
    if (!g_refcount) return NVML_ERROR_UNINITIALIZED;
    return injected(fn, -1, -1);
}

#define CHECK_DEV(d)                                 \
    do {                                             \
        int rc_ = check_dev(__func__, (d));          \
        if (rc_) return rc_;                         \
    } while (0)
#define CHECK_SYS()                                  \
    do {                                             \
        int rc_ = check_sys(__func__);               \
        if (rc_) return rc_;                         \
    } while (0)
#define NEED(p)                                                \
    do {                                                       \
        if (!(p)) return NVML_ERROR_INVALID_ARGUMENT;          \
    } while (0)

static int get_uint_attr(nvmlDevice_t d, const char *name, unsigned int *out) {
    double v;
    NEED(out);
    if (!dget(d, name, &v)) return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned int)u64(v);
    return NVML_SUCCESS;
}

static int get_ull_attr(nvmlDevice_t d, const char *name, unsigned long long *out) {
    double v;
    NEED(out);
    if (!dget(d, name, &v)) return NVML_ERROR_NOT_SUPPORTED;
    *out = u64(v);
    return NVML_SUCCESS;
}

static int copy_str(char *dst, unsigned int len, const char *src) {
    NEED(dst);
    if (!*src) return NVML_ERROR_NOT_SUPPORTED;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

static int proc_alive(const simproc *p, double t) { return p->start <= t && t < p->end; }

/* Does process p run on device d (a physical GPU also owns its MIG devices' processes)? */
static int proc_on(const simproc *p, const simdev *d) {
    if (p->dev == d->id) return 1;
    return d->parent < 0 && g_dev[p->dev].parent == d->id;
}

/* ---- init / system ---- */
static nvmlReturn_t do_init(const char *fn) {
    int rc;
    if (g_refcount > 0) {
        g_refcount++;
        return NVML_SUCCESS;
    }
    rc = load_scenario();
    if (rc) return rc;
    g_refcount = 1;
    rc = injected(fn, -1, -1);
    if (rc) {
        g_refcount = 0;
        return rc;
    }
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return do_init("nvmlInit"); }
EXPORT nvmlReturn_t nvmlInit(void) { return do_init("nvmlInit"); }
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return do_init("nvmlInit");
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
    if (!g_refcount) return NVML_ERROR_UNINITIALIZED;
    if (--g_refcount == 0) free_state();
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 13: return "Function Not Found";
    case 15: return "GPU is lost";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len) {
    CHECK_SYS();
    return copy_str(v, len, g_driver);
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int len) {
    CHECK_SYS();
    return copy_str(v, len, g_nvml);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    CHECK_SYS();
    NEED(v);
    *v = g_cuda;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
    CHECK_SYS();
    NEED(v);
    *v = g_cuda;
    return NVML_SUCCESS;
}

/* ---- device enumeration ---- */
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    int i;
    unsigned int n = 0;
    CHECK_SYS();
    NEED(count);
    for (i = 0; i < g_ndev; i++)
        if (g_dev[i].parent < 0) n++;
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *out) {
    int i;
    if (!g_refcount) return NVML_ERROR_UNINITIALIZED;
    NEED(out);
    for (i = 0; i < g_ndev; i++) {
        if (g_dev[i].parent < 0 && g_dev[i].index == (int)index) {
            int rc = check_dev(__func__, &g_dev[i]);
            if (rc) return rc;
            *out = &g_dev[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) {
    CHECK_DEV(d);
    NEED(index);
    if (d->parent >= 0) return NVML_ERROR_NOT_SUPPORTED;
    *index = (unsigned int)d->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int len) {
    CHECK_DEV(d);
    return copy_str(uuid, len, d->uuid);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len) {
    CHECK_DEV(d);
    return copy_str(name, len, d->name);
}

EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char *serial, unsigned int len) {
    CHECK_DEV(d);
    return copy_str(serial, len, d->serial);
}

/* N of the GPU's /dev/nvidiaN (attribute minor_number; a MIG device has none: NotSupported) */
EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor) {
    CHECK_DEV(d);
    return get_uint_attr(d, "minor_number", minor);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    unsigned int dom = 0, bus = 0, dv = 0, fn = 0;
    double v;
    CHECK_DEV(d);
    NEED(pci);
    if (d->parent >= 0) d = root_of(d);
    if (!*d->pci || sscanf(d->pci, "%x:%x:%x.%x", &dom, &bus, &dv, &fn) != 4) return NVML_ERROR_NOT_SUPPORTED;
    memset(pci, 0, sizeof *pci);
    pci->domain = dom;
    pci->bus = bus;
    pci->device = dv;
    pci->pciDeviceId = dget(d, "pci_device_id", &v) ? (unsigned int)u64(v) : 0;
    pci->pciSubSystemId = dget(d, "pci_subsystem_id", &v) ? (unsigned int)u64(v) : 0;
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", dom, bus, dv, fn);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", dom & 0xFFFF, bus, dv, fn);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, unsigned int *mode) {
    CHECK_DEV(d);
    return get_uint_attr(d, "persistence_mode", mode);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, unsigned int *mode) {
    CHECK_DEV(d);
    return get_uint_attr(d, "compute_mode", mode);
}

/* ---- MIG ---- */
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    int rc;
    CHECK_DEV(d);
    NEED(pending);
    rc = get_uint_attr(d, "mig_mode_current", current);
    if (rc) return rc;
    return get_uint_attr(d, "mig_mode_pending", pending);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
    CHECK_DEV(d);
    return get_uint_attr(d, "mig_max_devices", count);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index, nvmlDevice_t *out) {
    int i;
    double mig;
    CHECK_DEV(d);
    NEED(out);
    if (d->parent >= 0 || !dget(d, "mig_mode_current", &mig)) return NVML_ERROR_NOT_SUPPORTED;
    if (mig < 1) return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < g_ndev; i++) {
        if (g_dev[i].parent == d->id && g_dev[i].slot == (int)index) {
            *out = &g_dev[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *isMig) {
    CHECK_DEV(d);
    NEED(isMig);
    *isMig = d->parent >= 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id) {
    CHECK_DEV(d);
    NEED(id);
    if (d->parent < 0) return NVML_ERROR_INVALID_ARGUMENT;
    *id = d->gi;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id) {
    CHECK_DEV(d);
    NEED(id);
    if (d->parent < 0) return NVML_ERROR_INVALID_ARGUMENT;
    *id = d->ci;
    return NVML_SUCCESS;
}

/* ---- memory, utilization, clocks, thermals, power ---- */
static unsigned long long used_memory_of(simdev *d) {
    double base = 0, v;
    int i;
    double t = now_rel();
    unsigned long long used;
    dget(d, "memory_used_base", &base);
    used = u64(base);
    for (i = 0; i < g_nproc; i++) {
        simproc *p = &g_proc[i];
        if (proc_on(p, d) && proc_alive(p, t) && series_at(&p->used_memory, t, &v)) used += u64(v);
    }
    return used;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    double total, reserved = 0;
    unsigned long long used;
    CHECK_DEV(d);
    NEED(m);
    if (!dget(d, "memory_total", &total)) return NVML_ERROR_NOT_SUPPORTED;
    dget(d, "memory_reserved", &reserved);
    used = used_memory_of(d) + u64(reserved); /* v1 "used" includes reserved (R510+) */
    m->total = u64(total);
    m->used = used;
    m->free = m->total > used ? m->total - used : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    double total, reserved = 0;
    unsigned long long used, taken;
    CHECK_DEV(d);
    NEED(m);
    if (m->version != NVML_MEMORY_V2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (!dget(d, "memory_total", &total)) return NVML_ERROR_NOT_SUPPORTED;
    dget(d, "memory_reserved", &reserved);
    used = used_memory_of(d);
    m->total = u64(total);
    m->reserved = u64(reserved);
    m->used = used;
    taken = used + m->reserved;
    m->free = m->total > taken ? m->total - taken : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    double g, m;
    CHECK_DEV(d);
    NEED(u);
    if (d->parent >= 0) return NVML_ERROR_NOT_SUPPORTED;
    if (!dget(d, "gpu_util", &g) || !dget(d, "mem_util", &m)) return NVML_ERROR_NOT_SUPPORTED;
    u->gpu = (unsigned int)u64(g);
    u->memory = (unsigned int)u64(m);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, unsigned int type, unsigned int *clock) {
    static const char *names[] = {"clock_graphics_mhz", "clock_sm_mhz", "clock_mem_mhz", "clock_video_mhz"};
    CHECK_DEV(d);
    if (type > 3) return NVML_ERROR_INVALID_ARGUMENT;
    return get_uint_attr(d, names[type], clock);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r) {
    CHECK_DEV(d);
    return get_ull_attr(d, "clocks_event_reasons", r);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r) {
    CHECK_DEV(d);
    return get_ull_attr(d, "clocks_event_reasons", r);
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t d, unsigned long long *r) {
    CHECK_DEV(d);
    return get_ull_attr(d, "supported_clocks_event_reasons", r);
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r) {
    CHECK_DEV(d);
    return get_ull_attr(d, "supported_clocks_event_reasons", r);
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, unsigned int sensor, unsigned int *t) {
    CHECK_DEV(d);
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    return get_uint_attr(d, "temperature_c", t);
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t d, unsigned int which, unsigned int *t) {
    static const char *names[] = {"temp_shutdown_c", "temp_slowdown_c", "temp_mem_max_c", "temp_gpu_max_c"};
    CHECK_DEV(d);
    if (which > 3) return NVML_ERROR_NOT_SUPPORTED;
    return get_uint_attr(d, names[which], t);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
    CHECK_DEV(d);
    return get_uint_attr(d, "power_mw", mw);
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw) {
    CHECK_DEV(d);
    return get_uint_attr(d, "power_limit_mw", mw);
}

/* ---- ECC, retired pages, remapped rows, PCIe ---- */
EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    int rc;
    CHECK_DEV(d);
    rc = get_uint_attr(d, "ecc_mode_current", current);
    if (rc) return rc;
    return get_uint_attr(d, "ecc_mode_pending", pending);
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, unsigned int errorType, unsigned int counterType,
                                                unsigned long long *count) {
    char name[64];
    double mode;
    CHECK_DEV(d);
    if (errorType > 1 || counterType > 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (!dget(d, "ecc_mode_current", &mode) || mode < 1) return NVML_ERROR_NOT_SUPPORTED;
    snprintf(name, sizeof name, "ecc_%s_%s", errorType ? "uncorrected" : "corrected",
             counterType ? "aggregate" : "volatile");
    return get_ull_attr(d, name, count);
}

static int retired_pages(nvmlDevice_t d, unsigned int cause, unsigned int *count, unsigned long long *addresses,
                         unsigned long long *timestamps) {
    double supported;
    unsigned int n = 0, i;
    int k;
    NEED(count);
    if (!dget(d, "page_retirement", &supported) || supported < 1) return NVML_ERROR_NOT_SUPPORTED;
    if (cause > 1) return NVML_ERROR_INVALID_ARGUMENT;
    for (k = 0; k < g_npage; k++)
        if (g_page[k].dev == d->id && g_page[k].cause == (int)cause) n++;
    if (!addresses || *count < n) {
        *count = n;
        return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    for (k = 0, i = 0; k < g_npage; k++) {
        if (g_page[k].dev != d->id || g_page[k].cause != (int)cause) continue;
        addresses[i] = g_page[k].address;
        if (timestamps) timestamps[i] = g_page[k].timestamp;
        i++;
    }
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t d, unsigned int cause, unsigned int *count,
                                              unsigned long long *addresses) {
    CHECK_DEV(d);
    return retired_pages(d, cause, count, addresses, NULL);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t d, unsigned int cause, unsigned int *count,
                                                 unsigned long long *addresses, unsigned long long *timestamps) {
    CHECK_DEV(d);
    return retired_pages(d, cause, count, addresses, timestamps);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, unsigned int *pending) {
    double supported;
    CHECK_DEV(d);
    if (!dget(d, "page_retirement", &supported) || supported < 1) return NVML_ERROR_NOT_SUPPORTED;
    return get_uint_attr(d, "retired_pages_pending", pending);
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corr, unsigned int *unc,
                                              unsigned int *pending, unsigned int *failure) {
    int rc;
    CHECK_DEV(d);
    if ((rc = get_uint_attr(d, "remapped_rows_correctable", corr))) return rc;
    if ((rc = get_uint_attr(d, "remapped_rows_uncorrectable", unc))) return rc;
    if ((rc = get_uint_attr(d, "remapped_rows_pending", pending))) return rc;
    return get_uint_attr(d, "remapped_rows_failure", failure);
}

EXPORT nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t d, unsigned int *value) {
    CHECK_DEV(d);
    return get_uint_attr(d, "pcie_replay_counter", value);
}

EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t d, char *version, unsigned int len) {
    CHECK_DEV(d);
    return copy_str(version, len, root_of(d)->vbios);
}

/* ---- PCIe link and NVLink ---- */
EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen) {
    CHECK_DEV(d);
    return get_uint_attr(d, "pcie_gen_curr", gen);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen) {
    CHECK_DEV(d);
    return get_uint_attr(d, "pcie_gen_max", gen);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen) {
    CHECK_DEV(d);
    return get_uint_attr(d, "pcie_gen_gpu_max", gen);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int *width) {
    CHECK_DEV(d);
    return get_uint_attr(d, "pcie_width_curr", width);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int *width) {
    CHECK_DEV(d);
    return get_uint_attr(d, "pcie_width_max", width);
}

/* A link index NVML does not have is an invalid argument; a GPU without NVLink: NotSupported. */
static int nvlink_check(nvmlDevice_t d, unsigned int link) {
    double n;
    if (!dget(d, "nvlink_count", &n) || n < 1) return NVML_ERROR_NOT_SUPPORTED;
    return link < (unsigned int)u64(n) ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, unsigned int *active) {
    char name[48];
    int rc;
    CHECK_DEV(d);
    if ((rc = nvlink_check(d, link))) return rc;
    snprintf(name, sizeof name, "nvlink_state_%u", link);
    return get_uint_attr(d, name, active);
}

/* counter: nvmlNvLinkErrorCounter_t (0 DL replay, 1 DL recovery, 2 DL CRC flit, 3 DL CRC data) */
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t d, unsigned int link, unsigned int counter,
                                                    unsigned long long *value) {
    static const char *names[] = {"replay", "recovery", "crc_flit", "crc_data"};
    char name[48];
    int rc;
    CHECK_DEV(d);
    if ((rc = nvlink_check(d, link))) return rc;
    if (counter >= sizeof names / sizeof names[0]) return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(name, sizeof name, "nvlink_%s_%u", names[counter], link);
    return get_ull_attr(d, name, value);
}

/* ---- field values ---- */
enum { VT_UINT = 1, VT_ULL = 3 };
/* NVML_FI_* ids served, the attribute each reads and its value type */
static const struct {
    unsigned int id;
    const char *attr;
    int type;
} g_fields[] = {
    {91, "nvlink_count", VT_UINT},          /* NVML_FI_DEV_NVLINK_LINK_COUNT */
    {94, "pcie_replay_counter", VT_ULL},    /* NVML_FI_DEV_PCIE_REPLAY_COUNTER */
    {230, "gpu_recovery_action", VT_UINT},  /* NVML_FI_DEV_GET_GPU_RECOVERY_ACTION */
};

/* Every entry gets its own nvmlReturn (NotSupported for a field the scenario does not define);
 * the call itself succeeds for a valid device and array, as NVML's does. */
EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *values) {
    int i;
    size_t k;
    CHECK_DEV(d);
    NEED(values && count >= 0);
    for (i = 0; i < count; i++) {
        nvmlFieldValue_t *fv = &values[i];
        double v;
        fv->timestamp = (long long)(wall_now() * 1e6);
        fv->latencyUsec = 0;
        fv->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        for (k = 0; k < sizeof g_fields / sizeof g_fields[0]; k++) {
            if (g_fields[k].id != fv->fieldId) continue;
            if (!dget(d, g_fields[k].attr, &v)) break;
            fv->valueType = g_fields[k].type;
            memset(&fv->value, 0, sizeof fv->value);
            if (g_fields[k].type == VT_UINT)
                fv->value.uiVal = (unsigned int)u64(v);
            else
                fv->value.ullVal = u64(v);
            fv->nvmlReturn = NVML_SUCCESS;
            break;
        }
    }
    return NVML_SUCCESS;
}

/* ---- processes ---- */
static int running(nvmlDevice_t d, int type, unsigned int *count, nvmlProcessInfo_t *infos) {
    unsigned int n = 0;
    int i;
    double t = now_rel(), v;
    NEED(count);
    for (i = 0; i < g_nproc; i++)
        if (g_proc[i].type == type && proc_on(&g_proc[i], d) && proc_alive(&g_proc[i], t)) n++;
    if (!infos || *count < n) {
        *count = n;
        return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    n = 0;
    for (i = 0; i < g_nproc; i++) {
        simproc *p = &g_proc[i];
        simdev *on = &g_dev[p->dev];
        if (p->type != type || !proc_on(p, d) || !proc_alive(p, t)) continue;
        infos[n].pid = p->pid;
        infos[n].usedGpuMemory = series_at(&p->used_memory, t, &v) ? u64(v) : NVML_VALUE_NOT_AVAILABLE_ULL;
        infos[n].gpuInstanceId = on->parent >= 0 ? on->gi : NO_INSTANCE;
        infos[n].computeInstanceId = on->parent >= 0 ? on->ci : NO_INSTANCE;
        n++;
    }
    *count = n;
    return NVML_SUCCESS;
}

#define RUNNING(fname, type)                                                                          \
    EXPORT nvmlReturn_t fname(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos) {        \
        CHECK_DEV(d);                                                                                 \
        return running(d, type, count, infos);                                                        \
    }
RUNNING(nvmlDeviceGetComputeRunningProcesses_v3, 0)
RUNNING(nvmlDeviceGetComputeRunningProcesses_v2, 0)
RUNNING(nvmlDeviceGetGraphicsRunningProcesses_v3, 1)
RUNNING(nvmlDeviceGetGraphicsRunningProcesses_v2, 1)
RUNNING(nvmlDeviceGetMPSComputeRunningProcesses_v3, 2)
RUNNING(nvmlDeviceGetMPSComputeRunningProcesses_v2, 2)

/*
 * Per-process utilization: the simulated driver takes one sample per process
 * every util_period seconds (at epoch + k * util_period) for each live process
 * that has an sm_util series, keeps util_buffer periods, and returns the
 * samples newer than lastSeenTimeStamp (unix microseconds).  Nothing newer:
 * NVML_ERROR_NOT_FOUND.  A caller buffer too small for the samples gets the
 * oldest ones that fit (so a sample period passing between pynvml's sizing
 * call and its fetch call does not fail; the rest come on the next call).
 */
EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *samples,
                                                    unsigned int *count, unsigned long long lastSeen) {
    double t = now_rel(), last_rel, v;
    long long k, k0, k1;
    unsigned int n = 0, cap;
    int i;
    CHECK_DEV(d);
    NEED(count);
    if (d->parent >= 0 || !dget(d, "process_utilization", &v) || v < 1) return NVML_ERROR_NOT_SUPPORTED;
    cap = samples ? *count : 0;
    last_rel = (double)lastSeen / 1e6 - g_epoch;
    k1 = (long long)floor(t / g_util_period);
    k0 = k1 - g_util_buffer + 1;
    if (lastSeen) {
        long long kl = (long long)floor(last_rel / g_util_period + 1e-9) + 1;
        if (kl > k0) k0 = kl;
    }
    for (k = k0; k <= k1; k++) {
        double ts = (double)k * g_util_period;
        unsigned long long ts_us = u64((g_epoch + ts) * 1e6);
        if (lastSeen && ts_us <= lastSeen) continue;
        for (i = 0; i < g_nproc; i++) {
            simproc *p = &g_proc[i];
            double sm, mem = 0, enc = 0, dec = 0;
            if (p->dev != d->id || !proc_alive(p, ts) || !series_at(&p->sm_util, ts, &sm)) continue;
            if (samples && n < cap) {
                series_at(&p->mem_util, ts, &mem);
                series_at(&p->enc_util, ts, &enc);
                series_at(&p->dec_util, ts, &dec);
                samples[n].pid = p->pid;
                samples[n].timeStamp = ts_us;
                samples[n].smUtil = (unsigned int)u64(sm);
                samples[n].memUtil = (unsigned int)u64(mem);
                samples[n].encUtil = (unsigned int)u64(enc);
                samples[n].decUtil = (unsigned int)u64(dec);
            }
            n++;
        }
    }
    if (n == 0) return NVML_ERROR_NOT_FOUND;
    if (!samples) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = n < cap ? n : cap;
    return NVML_SUCCESS;
}

/* ---- accounting: every process that ran on the GPU, keyed by (pid, start) ---- */
static double weighted_avg(const series *s, double from, double to) {
    double sum = 0, cur = 0, t = from;
    int i;
    if (to <= from) {
        return series_at(s, from, &cur) ? cur : 0;
    }
    series_at(s, from, &cur);
    for (i = 0; i < s->n; i++) {
        if (s->p[i].t <= from) continue;
        if (s->p[i].t >= to) break;
        sum += cur * (s->p[i].t - t);
        t = s->p[i].t;
        cur = s->p[i].v;
    }
    sum += cur * (to - t);
    return sum / (to - from);
}

static int accounting_on(nvmlDevice_t d) {
    double v;
    if (!dget(d, "accounting_mode", &v)) return -1;
    return v >= 1;
}

EXPORT nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t d, unsigned int *mode) {
    CHECK_DEV(d);
    return get_uint_attr(d, "accounting_mode", mode);
}

EXPORT nvmlReturn_t nvmlDeviceGetAccountingBufferSize(nvmlDevice_t d, unsigned int *size) {
    double v;
    CHECK_DEV(d);
    NEED(size);
    if (accounting_on(d) != 1) return NVML_ERROR_NOT_SUPPORTED;
    *size = dget(d, "accounting_buffer_size", &v) ? (unsigned int)u64(v) : 4000;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t d, unsigned int *count, unsigned int *pids) {
    unsigned int n = 0;
    int i;
    double t = now_rel();
    CHECK_DEV(d);
    NEED(count);
    if (accounting_on(d) != 1) return NVML_ERROR_NOT_SUPPORTED;
    for (i = 0; i < g_nproc; i++)
        if (g_proc[i].dev == d->id && g_proc[i].start <= t) n++;
    if (!pids || *count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    n = 0;
    for (i = 0; i < g_nproc; i++)
        if (g_proc[i].dev == d->id && g_proc[i].start <= t) pids[n++] = g_proc[i].pid;
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t d, unsigned int pid, nvmlAccountingStats_t *st) {
    simproc *best = NULL;
    double t = now_rel(), from, until, mx = 0;
    int i;
    CHECK_DEV(d);
    NEED(st);
    if (accounting_on(d) != 1) return NVML_ERROR_NOT_SUPPORTED;
    for (i = 0; i < g_nproc; i++) {
        simproc *p = &g_proc[i];
        if (p->dev == d->id && p->pid == pid && p->start <= t && (!best || p->start > best->start)) best = p;
    }
    if (!best) return NVML_ERROR_NOT_FOUND;
    /* a process "running since forever" is accounted from the epoch on */
    from = isfinite(best->start) ? best->start : 0.0;
    until = best->end < t ? best->end : t;
    for (i = 0; i < best->used_memory.n; i++)
        if (best->used_memory.p[i].t <= until && best->used_memory.p[i].v > mx) mx = best->used_memory.p[i].v;
    memset(st, 0, sizeof *st);
    st->gpuUtilization = (unsigned int)u64(weighted_avg(&best->sm_util, from, until));
    st->memoryUtilization = (unsigned int)u64(weighted_avg(&best->mem_util, from, until));
    st->maxMemoryUsage = u64(mx);
    st->startTime = u64((g_epoch + from) * 1e6);
    st->time = until > from ? u64((until - from) * 1000.0) : 0;
    st->isRunning = best->end > t;
    return NVML_SUCCESS;
}

/* ---- events ---- */
EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    CHECK_DEV(d);
    return get_ull_attr(d, "supported_event_types", types);
}

EXPORT nvmlReturn_t nvmlEventSetCreate(simeventset **set) {
    simeventset *s;
    CHECK_SYS();
    NEED(set);
    s = calloc(1, sizeof *s);
    if (!s) return NVML_ERROR_UNKNOWN;
    s->delivered = calloc((size_t)g_nev + 1, 1);
    *set = s;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, simeventset *set) {
    double supported;
    CHECK_DEV(d);
    NEED(set);
    if (d->id >= 256) return NVML_ERROR_INVALID_ARGUMENT;
    if (!dget(d, "supported_event_types", &supported)) return NVML_ERROR_NOT_SUPPORTED;
    if (types & ~u64(supported)) return NVML_ERROR_NOT_SUPPORTED;
    set->mask[d->id] |= types;
    set->reg_time[d->id] = now_rel();
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(simeventset *set, nvmlEventData_t *data, unsigned int timeoutms) {
    double start = now_rel(), deadline = start + timeoutms / 1000.0;
    int rc = check_sys(__func__);
    if (rc) return rc;
    NEED(set && data);
    for (;;) {
        double t = now_rel();
        int i, best = -1;
        for (i = 0; i < g_nev; i++) {
            simevent *e = &g_ev[i];
            if (set->delivered[i] || !(set->mask[e->dev] & e->type)) continue;
            if (e->t <= set->reg_time[e->dev] || e->t > t) continue;
            if (best < 0 || e->t < g_ev[best].t) best = i;
        }
        if (best >= 0) {
            simevent *e = &g_ev[best];
            simdev *d = &g_dev[e->dev];
            set->delivered[best] = 1;
            data->device = d;
            data->eventType = e->type;
            data->eventData = e->data;
            data->gpuInstanceId = d->parent >= 0 ? d->gi : NO_INSTANCE;
            data->computeInstanceId = d->parent >= 0 ? d->ci : NO_INSTANCE;
            return NVML_SUCCESS;
        }
        if (t >= deadline) return NVML_ERROR_TIMEOUT;
        sleep_s(fmin(0.005, deadline - t));
    }
}

EXPORT nvmlReturn_t nvmlEventSetWait(simeventset *set, nvmlEventData_t *data, unsigned int timeoutms) {
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

EXPORT nvmlReturn_t nvmlEventSetFree(simeventset *set) {
    NEED(set);
    free(set->delivered);
    free(set);
    return NVML_SUCCESS;
}
