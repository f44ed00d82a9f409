/* shardchat.exe and shardchatw.exe: the Windows programs of ShardChat's bundle.
 *
 * The bundle is python.org's embeddable CPython beside the app (installer/windows/
 * build_windows.py). This launcher runs it the way the PyInstaller bundle's program runs
 * on Linux: `shardchat.exe ARGS` is `python shardchat_entry.py ARGS`, with the
 * interpreter loaded from python3XX.dll in the launcher's own folder, so sys.executable
 * is this program and the app's child processes (`sys.executable -m engine.child_process
 * ...`) start it again. The folder's python3XX._pth sets the module path and isolates the
 * interpreter from any Python the user has installed.
 *
 * Built twice with mingw-w64: the console program (the command line, and the window when
 * started with no arguments from a terminal) and, with -DSHARDCHAT_WINDOWED and
 * -mwindows, shardchatw.exe for the Start menu, which opens no console.
 * Python runs in UTF-8 mode (-X utf8): the console, files and pipes speak UTF-8 whatever
 * the system's ANSI code page is.
 */
#include <windows.h>
#include <shellapi.h>
#include <stdio.h>
#include <wchar.h>

#ifndef PYTHON_DLL
#define PYTHON_DLL L"python313.dll"
#endif

typedef int (*py_main_t)(int, wchar_t **);

static void say(const wchar_t *message) {
#ifdef SHARDCHAT_WINDOWED
    MessageBoxW(NULL, message, L"ShardChat", MB_OK | MB_ICONERROR);
#else
    fwprintf(stderr, L"shardchat: error: %ls\n", message);
#endif
}

static int run(void) {
    int argc = 0;
    wchar_t **argv = CommandLineToArgvW(GetCommandLineW(), &argc);
    wchar_t folder[MAX_PATH * 4];
    DWORD length = GetModuleFileNameW(NULL, folder, MAX_PATH * 4);
    if (argv == NULL || length == 0 || length >= MAX_PATH * 4) {
        say(L"cannot read this program's own path");
        return 1;
    }
    wchar_t *slash = wcsrchr(folder, L'\\');
    if (slash != NULL) *slash = L'\0';

    wchar_t dll[MAX_PATH * 4 + 32], entry[MAX_PATH * 4 + 64];
    _snwprintf(dll, sizeof dll / sizeof *dll, L"%ls\\%ls", folder, PYTHON_DLL);
    _snwprintf(entry, sizeof entry / sizeof *entry, L"%ls\\app\\shardchat_entry.py", folder);
    HMODULE python = LoadLibraryExW(dll, NULL, LOAD_WITH_ALTERED_SEARCH_PATH);
    if (python == NULL) {
        say(L"the bundled Python (" PYTHON_DLL L") is missing or broken: reinstall ShardChat");
        return 1;
    }
    py_main_t py_main = (py_main_t)(void *)GetProcAddress(python, "Py_Main");
    if (py_main == NULL) {
        say(L"the bundled Python has no Py_Main: reinstall ShardChat");
        return 1;
    }

    /* argv[0], -X utf8, the entry script, then the user's arguments */
    wchar_t **args = (wchar_t **)calloc((size_t)argc + 4, sizeof *args);
    int n = 0;
    args[n++] = argv[0];
    args[n++] = L"-X";
    args[n++] = L"utf8";
    args[n++] = entry;
    for (int i = 1; i < argc; i++) args[n++] = argv[i];
    args[n] = NULL;
    return py_main(n, args);
}

#ifdef SHARDCHAT_WINDOWED
int WINAPI wWinMain(HINSTANCE instance, HINSTANCE previous, PWSTR command, int show) {
    (void)instance, (void)previous, (void)command, (void)show;
    return run();
}
#else
int wmain(void) { return run(); }
#endif
