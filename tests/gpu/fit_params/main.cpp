// llama-fit-params for the GPU tier: llama.cpp's own fit (common/fit.cpp of the
// vendored llama.cpp, compiled unchanged) behind the printing of
// tools/fit-params/fit-params.cpp. Only the argument parsing differs: the
// upstream tool parses its flags with common/arg.cpp, which drags in all of
// common/ (chat templates, downloads, jinja); this takes the few flags the
// tier needs and sets the same llama.cpp parameters they set upstream.
//
// usage: llama-fit-params MODEL N_CTX N_UBATCH TARGET_MIB
//   n_batch = n_ubatch, flash attention off, f16 KV cache (as Llama() loads);
//   TARGET_MIB is fit's --fit-target: the memory to leave free on the device.
//   FIT_PARAMS_TRACE=1 prints fit's steps on stderr.
// The backend modules are loaded from GGML_MODULE_DIR (llama_cpp/lib, set when compiled),
// as upstream tools load them with ggml_backend_load_all() from beside their executable.
#include "fit.h"
#include "ggml-backend.h"
#include "llama.h"
#include "log.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <vector>

// common.cpp's; log.cpp asks it before colouring output.
bool tty_can_use_colors() { return false; }

int main(int argc, char ** argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s MODEL N_CTX N_UBATCH TARGET_MIB\n", argv[0]);
        return 2;
    }
    ggml_backend_load_all_from_path(GGML_MODULE_DIR);
    llama_backend_init();
    if (getenv("FIT_PARAMS_TRACE") != nullptr) {  // fit's own account of each step, on stderr
        common_log_set_verbosity_thold(LOG_LEVEL_TRACE);
    }

    llama_model_params mparams = llama_model_default_params();
    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = (uint32_t) atoi(argv[2]);
    cparams.n_ubatch = (uint32_t) atoi(argv[3]);
    cparams.n_batch = cparams.n_ubatch;
    cparams.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;

    std::vector<float> tensor_split(llama_max_devices(), 0.0f);
    std::vector<llama_model_tensor_buft_override> overrides(llama_max_tensor_buft_overrides(), {nullptr, nullptr});
    std::vector<size_t> margins(llama_max_devices(), size_t(atoll(argv[4])) * 1024 * 1024);

    const common_params_fit_status status = common_fit_params(argv[1], &mparams, &cparams,
            tensor_split.data(), overrides.data(), margins.data(), cparams.n_ctx,
            nullptr, GGML_LOG_LEVEL_ERROR);
    if (status != COMMON_PARAMS_FIT_STATUS_SUCCESS) {
        fprintf(stderr, "failed to fit CLI arguments to free memory (status %d)\n", (int) status);
        return 1;
    }
    // as tools/fit-params/fit-params.cpp prints them
    printf("-c %" PRIu32 " -ngl %" PRIi32, cparams.n_ctx, mparams.n_gpu_layers);
    bool any_tbo = false;
    // upstream's parser always hands fit a terminated list; with nothing to change fit leaves it unset
    const llama_model_tensor_buft_override * tbo = mparams.tensor_buft_overrides;
    for (size_t i = 0; tbo != nullptr && i < overrides.size() && tbo[i].pattern != nullptr; i++) {
        if (i == 0) {
            printf(" -ot \"");
        }
        printf("%s%s=%s", i > 0 ? "," : "", tbo[i].pattern, ggml_backend_buft_name(tbo[i].buft));
        any_tbo = true;
    }
    printf("%s\n", any_tbo ? "\"" : "");
    return 0;
}
