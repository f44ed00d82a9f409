/* icuuc.dll for the Wine prefix of `make test-windows`: Windows 10's system ICU, as Qt sees
 * it when ICU's converter data is absent. Not part of ShardChat.
 *
 * Qt6Core from PyPI's PySide6 wheels imports icuuc.dll, which every Windows since 10 1703
 * carries and Wine 8 does not; without it Qt6Core.dll does not load at all. Qt asks ICU
 * only for text codecs beyond the ones it implements itself (UTF-8/16/32, Latin-1, the
 * system code page), through these 18 ucnv_* functions (Qt6Core's import table). Here
 * every converter is unavailable, as in an ICU whose data file is missing: ucnv_open
 * fails with U_FILE_ACCESS_ERROR, no converter is ever made, so the functions that take
 * one are never reached and refuse if they are. ShardChat decodes documents with
 * charset-normalizer, not Qt's codecs.
 */
#include <stddef.h>
#include <stdint.h>

typedef int UErrorCode;
typedef uint16_t UChar;
typedef int8_t UBool;
typedef struct UConverter UConverter;
typedef void (*UConverterCallback)(void);

enum { U_ILLEGAL_ARGUMENT_ERROR = 1, U_FILE_ACCESS_ERROR = 4 };

static int refuse(UErrorCode *err, int code) {
    if (err != NULL && *err <= 0) *err = code;
    return 0;
}

#define EXPORT __declspec(dllexport)

EXPORT UConverter *ucnv_open(const char *name, UErrorCode *err) {
    (void)name;
    refuse(err, U_FILE_ACCESS_ERROR);
    return NULL;
}
EXPORT void ucnv_close(UConverter *cnv) { (void)cnv; }
EXPORT void ucnv_reset(UConverter *cnv) { (void)cnv; }
EXPORT int32_t ucnv_countAvailable(void) { return 0; }
EXPORT const char *ucnv_getAvailableName(int32_t n) { (void)n; return NULL; }
EXPORT const char *ucnv_getName(const UConverter *cnv, UErrorCode *err) {
    (void)cnv;
    refuse(err, U_ILLEGAL_ARGUMENT_ERROR);
    return NULL;
}
EXPORT const char *ucnv_getStandardName(const char *name, const char *standard, UErrorCode *err) {
    (void)name, (void)standard;
    refuse(err, U_FILE_ACCESS_ERROR);
    return NULL;
}
EXPORT int8_t ucnv_getMaxCharSize(const UConverter *cnv) { (void)cnv; return 0; }
EXPORT void ucnv_toUnicode(UConverter *cnv, UChar **target, const UChar *targetLimit,
                           const char **source, const char *sourceLimit, int32_t *offsets,
                           UBool flush, UErrorCode *err) {
    (void)cnv, (void)target, (void)targetLimit, (void)source, (void)sourceLimit;
    (void)offsets, (void)flush;
    refuse(err, U_ILLEGAL_ARGUMENT_ERROR);
}
EXPORT void ucnv_fromUnicode(UConverter *cnv, char **target, const char *targetLimit,
                             const UChar **source, const UChar *sourceLimit, int32_t *offsets,
                             UBool flush, UErrorCode *err) {
    (void)cnv, (void)target, (void)targetLimit, (void)source, (void)sourceLimit;
    (void)offsets, (void)flush;
    refuse(err, U_ILLEGAL_ARGUMENT_ERROR);
}
EXPORT int32_t ucnv_toUCountPending(const UConverter *cnv, UErrorCode *err) {
    (void)cnv;
    return refuse(err, U_ILLEGAL_ARGUMENT_ERROR);
}
EXPORT int32_t ucnv_fromUCountPending(const UConverter *cnv, UErrorCode *err) {
    (void)cnv;
    return refuse(err, U_ILLEGAL_ARGUMENT_ERROR);
}
EXPORT void ucnv_setToUCallBack(UConverter *cnv, UConverterCallback action, const void *context,
                                UConverterCallback *oldAction, const void **oldContext,
                                UErrorCode *err) {
    (void)cnv, (void)action, (void)context, (void)oldAction, (void)oldContext;
    refuse(err, U_ILLEGAL_ARGUMENT_ERROR);
}
EXPORT void ucnv_setFromUCallBack(UConverter *cnv, UConverterCallback action,
                                  const void *context, UConverterCallback *oldAction,
                                  const void **oldContext, UErrorCode *err) {
    (void)cnv, (void)action, (void)context, (void)oldAction, (void)oldContext;
    refuse(err, U_ILLEGAL_ARGUMENT_ERROR);
}
EXPORT void ucnv_getToUCallBack(const UConverter *cnv, UConverterCallback *action,
                                const void **context) {
    (void)cnv;
    if (action != NULL) *action = NULL;
    if (context != NULL) *context = NULL;
}
EXPORT void ucnv_getFromUCallBack(const UConverter *cnv, UConverterCallback *action,
                                  const void **context) {
    ucnv_getToUCallBack(cnv, action, context);
}
EXPORT void ucnv_cbToUWriteUChars(void *args, const UChar *source, int32_t length,
                                  int32_t offsetIndex, UErrorCode *err) {
    (void)args, (void)source, (void)length, (void)offsetIndex;
    refuse(err, U_ILLEGAL_ARGUMENT_ERROR);
}
EXPORT void ucnv_cbFromUWriteUChars(void *args, const UChar **source, const UChar *sourceLimit,
                                    int32_t offsetIndex, UErrorCode *err) {
    (void)args, (void)source, (void)sourceLimit, (void)offsetIndex;
    refuse(err, U_ILLEGAL_ARGUMENT_ERROR);
}
