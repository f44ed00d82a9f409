; Inno Setup 6 script: the Windows installer for ShardChat.
;
; Built by .github/workflows/installers.yml on windows-latest after installer\build.py has
; made the PyInstaller bundle (the same installer\shardchat.spec as Linux and macOS):
;
;   iscc /DAppVersion=0.1.0 installer\windows\shardchat.iss
;
; -> dist\ShardChat-0.1.0-windows-x64-setup.exe. It installs per user by default (no
; administrator prompt; "for all users" is offered), adds a Start menu entry (and a desktop
; icon if ticked) and an uninstaller that removes every installed file. Chats and profiles
; in %LOCALAPPDATA%\ShardChat stay, as they are the user's data.
; This cannot be built or run on the Linux machine the rest of the project is tested on.

#ifndef AppVersion
  #define AppVersion "0.0.0"
#endif
#ifndef BundleDir
  #define BundleDir "..\build\dist\shardchat"
#endif
#ifndef IconsDir
  #define IconsDir "..\build\icons"
#endif
; /DVariant=nvidia: the bundle carries the CUDA module and runtime (a separate download);
; it installs in place of the base one (same AppId)
#ifdef Variant
  #define FileSuffix "-" + Variant
#else
  #define FileSuffix ""
#endif

[Setup]
AppId={{6F0B8E84-3C5A-4F5E-9B7E-5D2C0A1E7B3D}
AppName=ShardChat
AppVersion={#AppVersion}
AppVerName=ShardChat {#AppVersion}
AppPublisher=ShardChat maintainers
DefaultDirName={autopf}\ShardChat
DefaultGroupName=ShardChat
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir=..\..\dist
OutputBaseFilename=ShardChat-{#AppVersion}-windows-x64{#FileSuffix}-setup
SetupIconFile={#IconsDir}\shardchat.ico
UninstallDisplayIcon={app}\shardchat.exe
UninstallDisplayName=ShardChat
Compression=lzma2
SolidCompression=yes
WizardStyle=modern

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "{#BundleDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\ShardChat"; Filename: "{app}\shardchat.exe"; WorkingDir: "{app}"
Name: "{autodesktop}\ShardChat"; Filename: "{app}\shardchat.exe"; WorkingDir: "{app}"; Tasks: desktopicon

[Run]
Filename: "{app}\shardchat.exe"; Description: "{cm:LaunchProgram,ShardChat}"; Flags: nowait postinstall skipifsilent
