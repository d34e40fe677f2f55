// lineage-server: parse the configuration, load the model and its chat template, start the
// scheduler (engine thread), serve HTTP until SIGINT/SIGTERM, then shut down in order: stop
// accepting HTTP, stop the scheduler, exit 0. Startup failures print one clear error, exit 1.
#include "cache/rule/digest.h"
#include "engine/chat_template.h"
#include "engine/device.h"
#include "engine/model.h"
#include "engine/multimodal.h"
#include "scheduler/scheduler.h"
#include "server/config.h"
#include "server/http/json_body.h"
#include "server/prepare/lora_registry.h"
#include "server/app/routes.h"
#include "util/files.h"

#include <httplib.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <future>
#include <iostream>
#include <malloc.h>
#include <memory>
#include <pthread.h>
#include <thread>

namespace {

using namespace lineage;

void setup_logging(const std::string & level) {
    auto logger = spdlog::stderr_color_mt("lineage");
    spdlog::set_default_logger(logger);
    spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%-5l%$ %v");
    spdlog::set_level(spdlog::level::from_str(level == "warn" ? "warning" : level));
    spdlog::flush_on(spdlog::level::info);
}

// The signal thread stops the HTTP server (no new connections) and the scheduler (requests in
// flight end with an error event, so their handlers return and httplib's workers can be
// joined). Before the server exists (model loading) it ends the process at once.
std::atomic<bool> stopping{false};
std::atomic<httplib::Server *> server_ptr{nullptr};
std::atomic<scheduler::scheduler *> scheduler_ptr{nullptr};
std::promise<void> signal_handled;  ///< set once the signal thread has stopped both

void wait_for_signals(const sigset_t & signals) {
    int sig = 0;
    sigwait(&signals, &sig);
    const bool first = !stopping.exchange(true);
    httplib::Server * srv = server_ptr.load();
    if (first) {
        spdlog::info("received {}; shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    if (srv) {
        srv->stop();
        if (scheduler::scheduler * sched = scheduler_ptr.load()) {
            sched->stop();
        }
        signal_handled.set_value();
    } else if (first) {
        spdlog::default_logger()->flush();
        std::_Exit(0);
    }
}

// The model, logged; nullptr (after the error line) when it cannot be loaded.
std::unique_ptr<engine::model> load_model(const server::server_config & cfg) {
    std::unique_ptr<engine::model> model;
    try {
        model = std::make_unique<engine::model>(
            engine::model_params{cfg.model_path, cfg.n_gpu_layers, cfg.use_mmap, cfg.use_mlock, cfg.use_repack});
    } catch (const std::exception & e) {
        spdlog::error("cannot load the model: {}", e.what());
        return nullptr;
    }
    spdlog::info("model {}: {} (arch {}, family {}, {:.1f} MiB, n_ctx_train {}, vocab {})", model->id(),
                 model->description(), model->architecture(), engine::to_string(model->family()),
                 static_cast<double>(model->size_bytes()) / (1024.0 * 1024.0), model->n_ctx_train(), model->n_vocab());
    return model;
}

// The model's chat template, or --chat-template-file's; nullptr (after the error line) when it
// cannot be read or parsed.
std::unique_ptr<engine::chat_template> load_template(const server::server_config & cfg, const engine::model & model) {
    std::string template_override;
    if (!cfg.chat_template_file.empty()) {
        auto text = util::read_whole_file(cfg.chat_template_file);
        if (!text) {
            spdlog::error("cannot read --chat-template-file {}", cfg.chat_template_file);
            return nullptr;
        }
        template_override = std::move(*text);
    }
    try {
        return std::make_unique<engine::chat_template>(model, template_override);
    } catch (const std::exception & e) {
        spdlog::error("{}{}", e.what(),
                      cfg.chat_template_file.empty() ? "; pass a working one with --chat-template-file" : "");
        return nullptr;
    }
}

// --mmproj's projector and the digest of its file into `projector` and `digest` (left empty
// without --mmproj); false (after the error line) when it cannot be loaded or read.
bool load_projector(const server::server_config & cfg, const engine::model & model,
                    std::unique_ptr<engine::projector> & projector, std::string & digest) {
    if (cfg.mmproj.empty()) {
        return true;
    }
    try {
        projector = std::make_unique<engine::projector>(model, cfg.mmproj, cfg.sched.n_threads, cfg.image_max_pixels);
    } catch (const std::exception & e) {
        spdlog::error("{}; check --mmproj", e.what());
        return false;
    }
    auto d = server::file_digest(cfg.mmproj, cfg.sched.cache.key_hash);
    if (!d) {
        spdlog::error("cannot read --mmproj {}", cfg.mmproj);
        return false;
    }
    digest = *d;
    spdlog::info("multimodal projector: {} (content {})", cfg.mmproj, cache::to_hex(digest).substr(0, 16));
    return true;
}

// The HTTP server's threads, timeouts and keep-alive.
void configure_http(httplib::Server & srv, const server::server_config & cfg) {
    // Every open connection holds a worker thread (a streaming request, a slow client, an idle
    // kept-alive connection). A fixed pool of --http-threads: httplib's on-demand threads start
    // only when no thread is idle at the moment a connection is queued, so a burst of slow
    // clients could leave later connections (/health) queued behind them while the pool is
    // below its maximum (docs/prompt-cache.md "Connections"). Connections that find every
    // worker busy wait in a queue of --http-queue, and beyond it are closed.
    const auto n_threads = static_cast<size_t>(cfg.http_threads);
    const auto max_queued = static_cast<size_t>(cfg.http_queue);
    srv.new_task_queue = [n_threads, max_queued] { return new httplib::ThreadPool(n_threads, n_threads, max_queued); };
    auto split = [](double s) {
        const auto sec = static_cast<time_t>(s);
        return std::pair<time_t, time_t>{sec, static_cast<time_t>((s - static_cast<double>(sec)) * 1e6)};
    };
    srv.set_read_timeout(split(cfg.http_read_timeout_s).first, split(cfg.http_read_timeout_s).second);
    srv.set_write_timeout(split(cfg.http_write_timeout_s).first, split(cfg.http_write_timeout_s).second);
    srv.set_keep_alive_max_count(static_cast<size_t>(cfg.http_keep_alive_max));
    srv.set_keep_alive_timeout(static_cast<time_t>(cfg.http_keep_alive_timeout_s));
}

// Binds, serves until a signal stops the server, then stops the scheduler: the process's exit
// code (1 when the port cannot be bound or listening fails).
int listen_until_stopped(httplib::Server & srv, scheduler::scheduler & sched, const server::server_config & cfg) {
    // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT on Linux, with which a second
    // server started on a busy port binds too and the kernel splits the connections between them.
    srv.set_socket_options([](socket_t sock) { httplib::set_socket_opt(sock, SOL_SOCKET, SO_REUSEADDR, 1); });
    if (!srv.bind_to_port(cfg.host, cfg.port)) {
        spdlog::error("cannot listen on {}:{} (address in use or not available); pick another with --port/--host",
                      cfg.host, cfg.port);
        sched.stop();
        return 1;
    }

    scheduler_ptr.store(&sched);
    server_ptr.store(&srv);
    if (stopping.load()) {
        srv.stop();  // a signal arrived while we were binding
    }
    spdlog::info("listening on http://{}:{}", cfg.host, cfg.port);
    const bool ok = srv.listen_after_bind() || stopping.load();
    if (stopping.load()) {
        // The signal thread saw the server (it is cleared only below) and is stopping the
        // scheduler; wait for it rather than stop concurrently.
        signal_handled.get_future().wait();
    }
    server_ptr.store(nullptr);
    scheduler_ptr.store(nullptr);
    sched.stop();
    spdlog::info("stopped");
    return ok ? 0 : 1;
}

int serve(const server::server_config & cfg) {
    // Before the model loads: what the device has, weights included (the memory plan).
    const engine::device_memory device = engine::read_device_memory(cfg.n_gpu_layers != 0);
    const std::unique_ptr<engine::model> model = load_model(cfg);
    if (!model) {
        return 1;
    }
    const std::unique_ptr<engine::chat_template> tmpl = load_template(cfg, *model);
    if (!tmpl) {
        return 1;
    }

    std::unique_ptr<server::lora_registry> loras;
    try {
        loras = std::make_unique<server::lora_registry>(cfg.loras, cfg.sched.cache.key_hash);
    } catch (const std::exception & e) {
        spdlog::error("{}: check the --lora / --lora-scaled paths", e.what());
        return 1;
    }
    std::unique_ptr<engine::projector> projector;
    std::string projector_digest;
    if (!load_projector(cfg, *model, projector, projector_digest)) {
        return 1;
    }
    scheduler::params sched_params = cfg.sched;
    sched_params.device = device;
    sched_params.projector = projector.get();
    std::unique_ptr<scheduler::scheduler> sched;
    try {
        sched = std::make_unique<scheduler::scheduler>(*model, sched_params);
    } catch (const std::exception & e) {
        spdlog::error("cannot start the engine: {}", e.what());
        return 1;
    }
    spdlog::info("engine: parallel {}, max sequence {} tokens, batch {}, prompt cache {} ({} mode)", cfg.sched.n_parallel,
                 sched->max_sequence_tokens(), cfg.sched.n_batch, cfg.sched.cache.enabled ? "on" : "off",
                 cfg.sched.cache.lineage ? "lineage" : "exact");

    httplib::Server srv;
    configure_http(srv, cfg);
    server::default_json_limits().max_depth = static_cast<size_t>(cfg.max_json_depth);
    server::default_request_limits() = cfg.limits;
    for (const auto & e : loras->list()) {
        spdlog::info("lora adapter {}: {} (scale {}, content {})", e.id, e.path, e.scale, e.digest.substr(0, 16));
    }
    server::server_context ctx(cfg, *model, *tmpl, *sched, *loras, projector.get(), projector_digest);
    server::install_routes(srv, ctx);
    return listen_until_stopped(srv, *sched, cfg);
}

}  // namespace

int main(int argc, char ** argv) {
    // Cache states are blobs of MBs to tens of MBs, allocated and freed all the time. glibc
    // serves blocks above its mmap threshold with mmap and returns them on free, but raises the
    // threshold to the largest block freed (up to 32 MiB), after which such blobs come from the
    // heap and their pages stay resident when freed: a fixed threshold keeps RSS near what the
    // cache accounts for (docs/benchmarks/README.md "Soak": 110 MiB less on bench-qwen35).
    mallopt(M_MMAP_THRESHOLD, 4 << 20);
    auto parsed = lineage::server::parse_config(argc, argv);
    if (!parsed.config) {
        (parsed.exit_code == 0 ? std::cout : std::cerr) << parsed.output << std::endl;
        return parsed.exit_code;
    }
    setup_logging(parsed.config->log_level);

    // SIGINT/SIGTERM are handled by one thread with sigwait; block them before any thread
    // starts so that every thread inherits the mask. A dead client must not kill the process.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

    std::thread(wait_for_signals, signals).detach();
    return serve(*parsed.config);
}
