# The first real laptop's record on Windows (issue 77): the twin of bench/laptop_check.sh. Run
# once after the README's install, in PowerShell with the venv active (.venv\Scripts\Activate.ps1),
# on power, other programs closed. It writes one folder to send back: hw.txt and hw.json, a short
# bench at llama.cpp's default threads, the same on the P-cores only and on the E-cores only
# where the CPU is hybrid, NAME.failed.txt for a stage that failed (the others still run), and
# README.txt. Written from the .sh; not yet run on a Windows machine (docs/laptops.md).
# Usage: powershell -ExecutionPolicy Bypass -File bench\laptop_check.ps1 [-Out DIR]
param([string]$Out = ("laptop-check-" + (Get-Date -Format "yyyyMMdd-HHmmss")))
$ErrorActionPreference = "Continue"
if (-not (Get-Command cpuspec -ErrorAction SilentlyContinue)) {
    Write-Error "laptop_check: cpuspec is not on PATH: run the README's install, then activate its venv"
    exit 2
}
if ((Test-Path $Out) -and (Get-ChildItem $Out | Measure-Object).Count -gt 0) {
    Write-Error "laptop_check: $Out exists and is not empty; give another folder"
    exit 2
}
New-Item -ItemType Directory -Force -Path $Out | Out-Null
$Short = @("--tasks", "json,code,story", "--prompts-per-task", "5", "--fixed", "--max-tokens", "64")
if ($env:LAPTOP_CHECK_ARGS) { $Short += $env:LAPTOP_CHECK_ARGS -split " " }

function Stage([string]$Name, [string[]]$CmdArgs) {
    Write-Host "laptop_check: $Name`: cpuspec $($CmdArgs -join ' ')"
    & cpuspec @CmdArgs > "$Out\$Name.txt" 2> "$Out\$Name.log"
    if ($LASTEXITCODE -ne 0) {
        Get-Content "$Out\$Name.txt", "$Out\$Name.log" | Set-Content "$Out\$Name.failed.txt"
        Remove-Item "$Out\$Name.txt"
        Write-Host "laptop_check: $Name failed (kept in $Out\$Name.failed.txt); going on"
    }
}

Stage "hw" @("hw")
& cpuspec hw --json > "$Out\hw.json" 2> $null
$pinning = "unknown"; $nP = 0; $nE = 0
try {
    $hw = Get-Content "$Out\hw.json" -Raw | ConvertFrom-Json
    $pinning = $hw.pinning
    $nP = @($hw.cores | Where-Object { $_.kind -eq "P" }).Count
    $nE = @($hw.cores | Where-Object { $_.kind -eq "E" }).Count
} catch { Write-Host "laptop_check: hw.json unreadable; P/E runs skipped" }
Stage "bench_default" ($Short + @("--json", "$Out\bench_default.json"))
if ($pinning -eq "none") {
    Write-Host "laptop_check: this OS lets no program choose cores: P-only and E-only runs skipped"
} elseif ($nE -gt 0) {
    Stage "bench_p_cores" ($Short + @("--p-cores", "$nP", "--json", "$Out\bench_p_cores.json"))
    Stage "bench_e_cores" ($Short + @("--e-cores", "$nE", "--json", "$Out\bench_e_cores.json"))
} else {
    Write-Host "laptop_check: one kind of core ($nP): no P/E split to measure"
}
$version = & python -c "import cpuspec; print(cpuspec.__version__)"
@(
    "cpuspec laptop check, $((Get-Date).ToUniversalTime().ToString('yyyy-MM-ddTHH:mm:ssZ'))",
    "OS: $([System.Environment]::OSVersion.VersionString); pinning: $pinning; P-cores: $nP; E-cores: $nE",
    "cpuspec $version",
    "Send this folder back (an issue on the project, or a mail): it holds no prompt text",
    "beyond the built-in suites, no user name and no path outside it."
) | Set-Content "$Out\README.txt"
Write-Host "laptop_check: done: $Out"
